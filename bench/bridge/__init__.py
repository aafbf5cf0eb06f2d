"""Benchmark and simulator of the device bridge (see docs/bridge.md)."""
