"""Sparkplug B 3.0 edge node: the gateway as an Edge Node, each bridged device a Device."""
