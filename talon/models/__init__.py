"""Models: what a loaded model is (``loaded``), where it runs (``device``), the embedded GGUF default
(``embedded``), loading by spec (``loading``), the shared read-only registry (``registry``), whether
the Hub can be reached (``hub``) and the Hub target + EAGLE-3 head pairs offered as presets
(``presets``).  Import from the submodules."""
