"""The ingest-otlp stage (OpenTelemetry ingest): its processor (``processor``); OTLP trace requests decoded
(``wire``), spans mapped to a :class:`~combee_core.models.Trace` (``mapping``) and assembled into one trace per run
over a bounded window (``assembler``). Pure: no Kafka, no HTTP; the wire format is read with the OpenTelemetry
project's own ``opentelemetry-proto`` (the ``[otlp]`` extra)."""
