"""Siemens S7 PLCs as bridge devices (S7comm over ISO-on-TCP with python-snap7)."""
