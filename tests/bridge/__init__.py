"""Tests of the device bridge (docs/bridge.md)."""
