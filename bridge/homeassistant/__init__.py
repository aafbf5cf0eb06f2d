"""Home Assistant MQTT discovery for the bridged points."""
