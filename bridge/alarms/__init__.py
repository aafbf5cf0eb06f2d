"""Alarms on the gateway: definitions, the ISA-18.2 state machine, its journal and runtime."""
