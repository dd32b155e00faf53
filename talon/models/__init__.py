"""Models: what a loaded model is (``loaded``), where it runs (``device``), the embedded GGUF default
(``embedded``), loading by spec (``loading``) and the shared read-only registry (``registry``).
Import from the submodules."""
