"""Secrets and record values never reach a log line through the Kafka client (docs/redaction.md, "Logs").

aiokafka logs every request and response at DEBUG with its fields (``Request to host:port 7:
SaslAuthenticateRequest_v0(sasl_auth_bytes=b'\\x00alice\\x00<password>')``), and each record it sends with its key and
value (``Sending (key=... value=...)``): SASL PLAIN passwords, OAUTHBEARER tokens, SCRAM exchanges and raw traces.
:class:`KafkaLogMask`, put on every aiokafka logger by :func:`mask_kafka_client_logs` (every client the project
builds calls it: ``streams.broker.connection.client_kwargs``), rewrites such a record's arguments before any handler
sees it, at every level: bytes become ``<N bytes>``, a protocol struct keeps its name and fields with their bytes
masked, a consumed record keeps its topic, partition and offset. The rest of the line stays, so
``COMBEE_KAFKA_DEBUG`` still shows what the client does.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import Any

CLIENT_PACKAGE = "aiokafka"
MAX_DEPTH = 8
"""Struct nesting masked in full; deeper values are shown as ``...`` (requests nest four or five levels)."""


def mask_value(value: Any, depth: int = 0) -> Any:
    """``value`` as it may be logged: bytes-like as their length, protocol structs and containers walked, a consumed
    record as where it came from; anything else unchanged."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return _Shown(f"<{len(value)} bytes>")
    if depth >= MAX_DEPTH:
        return "..."
    schema = getattr(type(value), "SCHEMA", None)
    if schema is not None and hasattr(schema, "names"):  # aiokafka.protocol.struct.Struct (no import: duck-typed)
        fields = ", ".join(f"{name}={_shown(mask_value(getattr(value, name, None), depth + 1))!r}"
                           for name in schema.names)
        return _Shown(f"{type(value).__name__}({fields})")
    if all(hasattr(value, name) for name in ("topic", "partition", "offset", "value")):  # a ConsumerRecord
        return _Shown(f"{type(value).__name__}(topic={value.topic}, partition={value.partition}, "
                      f"offset={value.offset}, value=<masked>)")
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a named tuple (TopicPartition, ...)
        fields = ", ".join(f"{name}={_shown(mask_value(item, depth + 1))!r}"
                           for name, item in zip(value._fields, value, strict=False))
        return _Shown(f"{type(value).__name__}({fields})")
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [_shown(mask_value(item, depth + 1)) for item in value]
        return _Shown(repr(items) if isinstance(value, list) else repr(tuple(items)))
    if isinstance(value, dict):
        return _Shown(repr({_shown(mask_value(key, depth + 1)): _shown(mask_value(item, depth + 1))
                            for key, item in value.items()}))
    return value


def _shown(value: Any) -> Any:
    """A masked part as it shows inside a struct or container: itself when masked, else as its own repr would."""
    return value if isinstance(value, _Shown) else _Shown(repr(value))


class _Shown(str):
    """A string that is its own ``repr`` (a masked part shown inside a container without quotes)."""

    def __repr__(self) -> str:
        return str(self)


class KafkaLogMask(logging.Filter):
    """Masks the arguments of a Kafka client's log record (:func:`mask_value`); never drops a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            if isinstance(record.args, tuple):
                record.args = tuple(mask_value(arg) for arg in record.args)
            elif isinstance(record.args, dict):
                record.args = {key: mask_value(arg) for key, arg in record.args.items()}
            if not isinstance(record.msg, str):
                record.msg = str(mask_value(record.msg))
        except (TypeError, ValueError, AttributeError, RecursionError):  # an object we cannot walk: hide them all
            record.args = tuple("<masked>" for _ in record.args) if isinstance(record.args, tuple) else None
            record.msg = str(record.msg)
        return True


@functools.lru_cache(maxsize=1)
def client_logger_names() -> tuple[str, ...]:
    """Every module logger of the Kafka client package (``logging.getLogger(__name__)`` in each), from its files:
    a logger made here before its module is imported is the one the module gets."""
    import aiokafka

    names = [CLIENT_PACKAGE]
    for root in aiokafka.__path__:
        for path in sorted(Path(root).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            parts = parts[:-1] if parts[-1] == "__init__" else parts
            if parts:
                names.append(".".join((CLIENT_PACKAGE, *parts)))
    return tuple(names)


def mask_kafka_client_logs() -> None:
    """Put one :class:`KafkaLogMask` on every logger of the Kafka client (idempotent: a logger that has one keeps
    it). A logger's filters apply to the records it makes, before any handler (a host's own included)."""
    for name in client_logger_names():
        logger = logging.getLogger(name)
        if not any(isinstance(existing, KafkaLogMask) for existing in logger.filters):
            logger.addFilter(KafkaLogMask())
