"""Windowed aggregates of points, computed on the gateway (docs/bridge.md, "Aggregates")."""
