"""``python -m talon.bench``: see ``talon.bench.cli``."""

import sys

from .cli import main

sys.exit(main())
