"""What runs per step: tree builders (``builders``), verification (``verify``), the one decoding loop
(``decode``), async speculation (``speculation``), the tree lab's frozen step (``frozen_step``),
position-keyed sampling noise (``sampling``) and where output ends (``stopping``).  The KV caches and
static runners it runs on are ``talon.runtime``.  Import from the submodules."""
