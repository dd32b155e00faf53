"""The runtime below the engine and the drafters: preallocated KV buffers, tree KV caches, static
runners (CUDA graphs).  It knows models (``talon.models``) and draft trees (``talon.tree``), never the
decoding loop or a drafter."""
