"""``python -m cloud_spark …`` and ``spark-submit cloud_spark/__main__.py …``.

Under spark-submit this file runs as a plain script (no package), so the directory above it
is put on ``sys.path`` first to make ``cloud_spark`` importable. Executors need nothing: the
jobs use no Python UDFs, everything runs in the JVM.
"""

from __future__ import annotations

import sys
from pathlib import Path

if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cloud_spark.cli import main

if __name__ == "__main__":
    sys.exit(main())
