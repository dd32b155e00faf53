"""What runs per step: the tree KV cache (``kv_cache``), tree builders (``builders``), verification
(``verify``), the decoding loop (``decode``), async speculation (``speculation``) and where output
ends (``stopping``).  Import from the submodules."""
