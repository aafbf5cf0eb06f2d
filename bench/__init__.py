"""Benchmarks: a load generator that is never the bottleneck and a side-by-side with mosquitto.

Run `python -m bench.compare` from the repository root; see `bench/README.md`.
"""
