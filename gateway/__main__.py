"""`python -m gateway` is the `outpost` command."""

import sys

from gateway.appliance.cli import main

sys.exit(main())
