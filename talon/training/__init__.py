"""Offline work: the draft-head trainer (``train_head``, ``python -m talon.training.train_head``) and the
prompt pool it answers (``prompt_pool``).  Import from the submodules."""
