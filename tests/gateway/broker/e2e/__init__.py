"""End-to-end tests: the real `outpost run` process driven by real clients and raw bytes."""
