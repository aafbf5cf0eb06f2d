"""`python -m outpost` is the `outpost` command."""

import sys

from outpost.cli import main

sys.exit(main())
