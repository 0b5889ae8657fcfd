"""Harness for tests and benchmarks, not used by the product: which broker they use (``KAFKA_BOOTSTRAP_SERVERS``,
testcontainers or an embedded Tansu) and worker processes run as a fleet."""
