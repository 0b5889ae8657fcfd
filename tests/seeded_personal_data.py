"""Personal data and secrets seeded into every text field of a trace, for the redaction tests (unit and broker)."""

from __future__ import annotations

from combee_core.models import Trace

SEEDED: dict[str, str] = {
    "email": "alice.smith+billing@example.com",
    "email2": "bob.jones@corp.example.org",
    "phone": "+1 415-555-0134",
    "phone2": "(212) 555-0199",
    "phone3": "+44 20 7946 0958",
    "card": "4111 1111 1111 1111",
    "card2": "5500-0000-0000-0004",
    "openai": "sk-proj-Zx81kLmN02pQrStUvWx3yZ",
    "github": "ghp_0123456789abcdefghijABCDEFGHIJklmnop",
    "aws": "AKIAIOSFODNN7EXAMPL3",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJlLXZhbHVl",
    "bearer": "tok3nValue0123456789abcd",
    "password": "Hunter2-Swordfish!",
    "employee": "EMP-884213",
}
"""What must never appear past the ingest point (``employee`` only with the user pattern EMPLOYEE=EMP-\\d{6})."""

EMPLOYEE_PATTERN = r"EMPLOYEE=EMP-\d{6}"


def seeded_trace(base: Trace, n: int = 0) -> Trace:
    """``base`` with seeded data in every text field: ids, input, output, feedback (a LESSON line the simulator
    learns from, so a missed redaction would reach the playbook), steps' role, content and tool, metadata keys and
    values."""
    s = SEEDED
    return Trace.model_validate({**base.model_dump(), **{
        "trace_id": f"run-{n}-{s['email2']}",
        "agent_id": f"agent-{s['email2']}",
        "task_id": f"{base.task_id}-{s['email2']}",
        "input": f"{base.input}\nCustomer {s['email']} (phone {s['phone']}) paid with card {s['card']}.",
        "output": (f"{base.output}\nCalled {s['phone2']}; used key {s['openai']} and "
                   f"Authorization: Bearer {s['bearer']}"),
        "feedback": (f"{base.feedback}\nLESSON[strategies]: confirm the invoice with {s['email2']} or "
                     f"{s['phone3']} before refunding card {s['card2']}"),
        "steps": [*base.steps,
                  {"role": f"user {s['email']}", "content": f"password={s['password']} jwt {s['jwt']}",
                   "tool": f"lookup {s['phone']}"},
                  {"role": "tool", "content": f"aws {s['aws']} github {s['github']} staff {s['employee']}"}],
        "metadata": {**base.metadata, f"contact {s['email2']}": f"card {s['card']} staff {s['employee']}",
                     "note": f"call {s['phone3']}"},
    }})
