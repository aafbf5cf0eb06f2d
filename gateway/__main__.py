"""`python -m gateway` is the `outpost` command."""

import sys

from gateway.cli import main

sys.exit(main())
