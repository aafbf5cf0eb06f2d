"""The batch jobs: each module is extract → pure ``DataFrame -> DataFrame`` transforms → load.

:data:`JOBS` lists them in dependency order; ``python -m cloud_spark all`` runs them in it.
"""

from __future__ import annotations

JOBS = ("silver", "rollups", "alarms", "availability", "quality", "health", "fleet", "report")
