"""`python -m agent.cli`: the `skiff` command."""

import sys

from agent.cli import main

sys.exit(main())
