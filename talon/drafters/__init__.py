"""Drafters: the interface (``base``: ``Drafter``, ``Proposal``) and its policies: a small causal LM
(``model``), the EAGLE-style draft head (``head_model``: the network and its files; ``head``: drafting
with it), prompt lookup (``ngram``), model + lookup merged (``hybrid``); ``factory`` parses drafter
specs and builds one per run.  Import from the submodules."""
