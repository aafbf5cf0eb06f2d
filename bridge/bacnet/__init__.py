"""BACnet/IP devices (bridge/bacnet/config.py, device.py; the codec in tags.py and wire.py)."""
