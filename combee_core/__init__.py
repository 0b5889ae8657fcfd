"""Combee core: pure algorithms and typed models for parallel prompt learning. Imports no Kafka library."""

__version__ = "0.1.0"
