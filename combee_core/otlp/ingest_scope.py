"""Which playbooks an OTLP export request writes into, against what the sender's key may write (pure; ``combee
otlp-receiver`` binds it).

A span's playbook is its ``combee.playbook.id``, else its resource's (what the mapping reads,
``combee_core.otlp.mapping``). With a key scoped to playbooks (``write=`` in its line,
``combee_core.serve.access_keys``), every span must land in one of them: a span naming another playbook refuses the
whole request (nothing of it is written); a span naming none is stamped with the key's playbook when the key writes
exactly one, else it would go to ``COMBEE_OTLP_DEFAULT_PLAYBOOK``, which the key must then be allowed to write. A key
for every playbook (``write=*``, or no key configured on a loopback receiver) leaves the request as it is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from combee_core.errors import CombeeError
from combee_core.otlp.evaluations import text as _text
from combee_core.otlp.mapping import PLAYBOOK_ID
from combee_core.otlp.wire import iter_spans
from combee_core.serve.access_keys import Grant

if TYPE_CHECKING:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest


class ScopeRefused(CombeeError, PermissionError):
    """A request writes into a playbook the sender's key may not write (the message says which, one line)."""


def enforce_write_scope(request: ExportTraceServiceRequest, grant: Grant, default_playbook: str | None) -> int:
    """Check (and stamp) every span of ``request`` in place against ``grant``; the number of spans stamped with the
    key's one playbook. :class:`ScopeRefused` when a span would land outside the key's playbooks."""
    if grant.writes_everywhere:
        return 0
    if not grant.write:
        raise ScopeRefused(f"key {grant.name} may write no playbook (its line has no write=)")
    only = next(iter(grant.write)) if len(grant.write) == 1 else None
    protos = [span for resource in request.resource_spans for scope in resource.scope_spans for span in scope.spans]
    stamped = 0
    for proto, span in zip(protos, iter_spans(request), strict=True):
        named = _text(span.attribute(PLAYBOOK_ID))
        if not named and only is not None:
            added = proto.attributes.add()
            added.key = PLAYBOOK_ID
            added.value.string_value = only
            stamped += 1
            continue
        target = named or default_playbook
        if target is None:
            raise ScopeRefused(f"a span names no {PLAYBOOK_ID} and key {grant.name} writes to several playbooks: "
                               f"set {PLAYBOOK_ID} on the spans or their resource")
        if not grant.may_write(target):
            raise ScopeRefused(f"key {grant.name} may not write traces of playbook {target[:80]}"
                               + ("" if named else f" (the default playbook, COMBEE_OTLP_DEFAULT_PLAYBOOK: spans "
                                                   f"name no {PLAYBOOK_ID})"))
    return stamped
