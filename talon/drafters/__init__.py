"""Drafters: the interface (``base``: ``Drafter``, ``Proposal``) and its policies: a small causal LM
(``model``), draft heads that read the target's hidden states (``head``: the one drafter for every
head network; ``head_model``: our EAGLE-style head and its files; ``eagle3_model``: EAGLE-3 heads in
the public checkpoints' layouts, read and written; ``speculators_format``: vLLM's speculators layout;
``export_eagle3``: the export command), prompt lookup (``ngram``), model + lookup merged (``hybrid``);
``factory`` parses drafter specs and builds one per run.  Import from the submodules."""
