"""`python -m agent.cli`: the `skiff` command."""

import sys

from skiff.agent.cli import main

sys.exit(main())
