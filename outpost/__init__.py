"""outpost, the appliance: assembles the broker, storage, the device bridge and the uplink."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("outpost")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"
