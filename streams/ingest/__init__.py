"""Doors into the pipeline for agents that already emit OpenTelemetry: the OTLP/HTTP receiver (``otlp_receiver``)."""
