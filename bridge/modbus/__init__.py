"""Modbus RTU / TCP / RTU-over-TCP devices: pure converters and planner, bus and poller."""
