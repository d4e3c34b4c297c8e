"""``python -m sweeper.sim``: the simulated SGLang server (a test double)."""

import sys

from sweeper.sim.app import main

sys.exit(main())
