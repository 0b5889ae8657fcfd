"""A child's agent reports entries as its composed view names them (``scope/entry_id``): the child's reflector looks
up its own entries by their ids, tags only them, and counts (rather than silently drops) the inherited ones."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson

from combee_core.llm.roles import LLMReply, LLMRequest, LLMRoles
from combee_core.models import PlaybookEntry, Reflection, Trace
from combee_core.playbook import Playbook
from combee_core.processors.effects import Count
from combee_core.reflect.processor import inherited_used, reflect_all
from streams.topology.playbook_view import used_entries_text

USED = "tenant-a/str-00001, str-00002, shared/str-00001"


def trace(used: str = USED) -> Trace:
    return Trace(trace_id="t-1", playbook_id="tenant-a", playbook_version=1, agent_id="a", task_id="x",
                 input="What is 2+2?", output="5", feedback="Wrong.", success=False,
                 metadata={"used_entries": used} if used else {}, created_at=datetime(2026, 1, 1, tzinfo=UTC))


async def test_the_childs_reflection_tags_its_own_entries_by_their_ids_and_not_the_inherited():
    async def answer(request: LLMRequest) -> LLMReply:
        return LLMReply(text=orjson.dumps({"insights": [], "entry_tags": [
            {"entry_id": "tenant-a/str-00001", "tag": "helpful"}, {"entry_id": "str-00002", "tag": "harmful"},
            {"entry_id": "shared/str-00001", "tag": "helpful"}]}).decode())

    reflection = await LLMRoles(responder=answer).reflect(trace())
    assert [(t.entry_id, t.tag) for t in reflection.entry_tags] == [("str-00001", "helpful"),
                                                                     ("str-00002", "harmful")]


def test_the_reflectors_context_shows_the_childs_own_entries_and_says_the_inherited_are_not_learned_from():
    entries = [PlaybookEntry(entry_id=f"str-0000{n}", section="strategies", content=f"own lesson {n}",
                             created_version=1, updated_version=1) for n in (1, 2)]
    text = used_entries_text(Playbook.from_entries("tenant-a", 1, entries), USED)
    lines = text.splitlines()
    assert lines[0].startswith("[str-00001]") and "own lesson 1" in lines[0]
    assert lines[1].startswith("[str-00002]") and "own lesson 2" in lines[1]
    assert lines[2] == "[shared/str-00001] (inherited from playbook shared: not learned from here)"


async def test_inherited_uses_are_counted_not_dropped_silently():
    async def role(trace: Trace, used: str | None) -> Reflection:
        return Reflection(reflection_id="r", trace_id=trace.trace_id, playbook_id=trace.playbook_id,
                          seen_version=1, insights=[], model="sim", trace_digest="d")

    async def no_context(trace: Trace) -> str | None:
        return None

    assert inherited_used(trace()) == ["shared/str-00001"]
    [(_, effects)] = await reflect_all([(trace(), "k")], role, no_context)
    assert Count("inherited_entries_not_learned", 1) in effects
    [(_, plain)] = await reflect_all([(trace("str-00001,tenant-a/str-00002"), "k")], role, no_context)
    assert not any(isinstance(e, Count) and e.name == "inherited_entries_not_learned" for e in plain)
