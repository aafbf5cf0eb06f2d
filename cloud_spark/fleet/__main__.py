"""`python -m cloud_spark.fleet ...`: the fleet commands (cloud_spark/fleet/cli.py)."""

from __future__ import annotations

import sys

from cloud_spark.fleet.cli import main

if __name__ == "__main__":
    sys.exit(main())
