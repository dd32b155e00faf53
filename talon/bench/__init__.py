"""Measuring: prompt sets (``prompts``), suites as data (``suites``), transformers' own generation as
peers (``peers``), the runner (``runner``), results files (``results``) and the CLI (``cli``,
``python -m talon.bench``).  Import from the submodules; ``prompts``, ``suites`` and ``results`` are
torch-free, so ``viz`` can read them."""
