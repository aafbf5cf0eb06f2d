"""outpost: the edge gateway's Python packages (see docs/design.md for the layout)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("outpost")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"
