"""Facts several tests check in a fresh interpreter, gathered in one: starting an interpreter that imports litellm
costs about 10 s of CPU, which three tests used to pay each (docs/benchmarks.md, "mypy and fresh interpreters").

``python -m tests.unit.fresh_interpreter OUT`` (from the repository root, as the fixture ``fresh_import_facts`` in
tests/unit/conftest.py runs it, once per test session) writes the facts to ``OUT`` as JSON. In one interpreter, with
every socket connection and name lookup refused and recorded from the first line on, in this order:

1. ``core_walk``: every combee_core module imported (this imports litellm, through ``combee_core.llm.provider``):
   how many, which Kafka clients or streams modules that loaded, and whether litellm was among what it loaded.
2. ``sim_call``: a reflection on the simulator through litellm's ``combee-sim`` provider: its insight and cost.

Each stage records what it printed, the connections it attempted, and its traceback instead of its facts if it
raised. Nothing of the tests' own process is loaded before the stages (this module imports only the standard
library at its top)."""

from __future__ import annotations

import contextlib
import io
import json
import socket
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

FORBIDDEN_IN_CORE = {"aiokafka", "kafka", "faust", "confluent_kafka", "streams"}

attempts: list[str] = []


def _refuse_connect(sock: socket.socket, address: object, *args: object) -> None:
    attempts.append(f"connect {address!r}")
    raise OSError("network access attempted")


def _refuse_lookup(host: object, port: object, *args: object, **kwargs: object) -> None:
    attempts.append(f"getaddrinfo {host!r} {port!r}")
    raise OSError("network access attempted")


def _refuse_network() -> None:
    socket.socket.connect = _refuse_connect  # type: ignore[method-assign,assignment]
    socket.socket.connect_ex = _refuse_connect  # type: ignore[method-assign,assignment]
    socket.getaddrinfo = _refuse_lookup  # type: ignore[assignment]


def _core_walk() -> dict[str, Any]:
    import importlib
    import pkgutil

    import combee_core

    names = [m.name for m in pkgutil.walk_packages(combee_core.__path__, "combee_core.")]
    for name in names:
        importlib.import_module(name)
    loaded = {m.split(".")[0] for m in sys.modules}
    return {"modules": len(names), "forbidden": sorted(loaded & FORBIDDEN_IN_CORE), "litellm": "litellm" in loaded}


def _sim_call() -> dict[str, Any]:
    import asyncio
    from datetime import datetime, timezone

    from combee_core.llm.roles import LLMRoles
    from combee_core.models import Trace

    trace = Trace(trace_id="t", playbook_id="pb", playbook_version=0, agent_id="a", task_id="x", input="i",
                  output="o", feedback="LESSON[formulas]: Use SUMIFS.", success=False,
                  created_at=datetime.now(timezone.utc))
    reflection = asyncio.run(LLMRoles(sim_through_litellm=True).reflect(trace))
    return {"insight": reflection.insights[0].content if reflection.insights else None,
            "cost_usd": reflection.usage.cost_usd}


def _stage(run: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    printed = io.StringIO()
    before = len(attempts)
    try:
        with contextlib.redirect_stdout(printed):
            facts: dict[str, Any] = {"facts": run()}
    except BaseException:  # reported to the test that reads this stage
        facts = {"error": traceback.format_exc()}
    return facts | {"printed": printed.getvalue(), "network_attempts": attempts[before:]}


def main(out: Path) -> None:
    _refuse_network()
    report = {"core_walk": _stage(_core_walk), "sim_call": _stage(_sim_call)}
    out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
