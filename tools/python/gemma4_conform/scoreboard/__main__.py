"""python -m gemma4_conform.scoreboard: the scoreboard (gemma4_conform/scoreboard/__init__.py)."""
import sys

from . import main

sys.exit(main())
