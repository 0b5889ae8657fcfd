"""Combee Streams' Kafka side: broker management, topics, stages, the worker and the CLI."""
