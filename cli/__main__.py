"""`python -m skiff.cli`: the `skiff` command."""

import sys

from skiff.cli import main

sys.exit(main())
