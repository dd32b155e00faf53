"""Drafters: the interface (``base``: ``Drafter``, ``Proposal``) and its policies: a small causal LM
(``model``), draft heads that read the target's hidden states (``head``: the one drafter for every
head network; ``head_model``: our EAGLE-style head and its files; ``eagle3_model``: EAGLE-3 heads in
the public checkpoints' layout, read and written), prompt lookup (``ngram``), model + lookup merged
(``hybrid``); ``factory`` parses drafter specs and builds one per run.  Import from the submodules."""
