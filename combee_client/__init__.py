"""Combee Streams' Python client for agents: the served playbook version (cached, followed in the background from
the ``playbook`` and ``promoted`` topics, kept while the broker is away), the entries a task needs as prompt text,
and runs reported as traces whose ``used_entries`` are filled in (docs/client.md).

Installs with ``pip install 'combee-streams[client]'``; imports aiokafka, pydantic, orjson and numpy, not the
pipeline (no LLM library, no stage)."""

from combee_client.client import ClientError, CombeeClient, Redactor, ReportNotDelivered, ServedPlaybook
from combee_client.runs import Rendering

__all__ = ["ClientError", "CombeeClient", "Redactor", "Rendering", "ReportNotDelivered", "ServedPlaybook"]
