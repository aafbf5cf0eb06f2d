"""Shared test helpers: real peers (mosquitto) started on free 127.0.0.1 ports."""
