"""Harness for tests and benchmarks (not used by the product): worker processes run as a fleet."""
