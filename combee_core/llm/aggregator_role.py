"""The aggregator role: one call per subgroup window of reflection copies, answering playbook operations (a partial
update). Its prompt; the call, its retries and its record are ``roles.LLMRoles``'."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from combee_core.llm.prompts import (
    ANSWER_RULE,
    DATA_FENCE,
    OPERATION_LIMITS,
    OPERATIONS_SHAPE,
    Messages,
    data_message,
    numbered,
)
from combee_core.models import Reflection

AGGREGATOR_SYSTEM = (
    "You are an aggregator of a prompt-learning system. You receive numbered reflections, each drawn from one\n"
    "agent run, with their insights and entry tags, and the current playbook (one entry per line as\n"
    "[id] helpful=X harmful=Y :: content, under ## section headings; it may be empty). Some reflections are copies\n"
    "of each other. Answer with the CHANGES to the playbook, not a new playbook:\n"
    "- a lesson the playbook already holds, in any wording: do not ADD it; TAG that entry helpful (count = how\n"
    "  many items restate it);\n"
    "- a new lesson: one ADD per distinct lesson (merge duplicates and paraphrases; support = the number of items\n"
    "  that backed it);\n"
    "- entry tags from the reflections: TAG operations summing them per entry and verdict (count = how many);\n"
    "- UPDATE an entry the reflections correct or sharpen, MERGE entries that say the same thing (first id kept),\n"
    "  DELETE an entry the reflections show to be wrong. Use only ids shown in the playbook.\n"
    "Keep every distinct new lesson; do not drop a lesson because only one item states it.\n"
    + OPERATION_LIMITS
    + DATA_FENCE
    + ANSWER_RULE
    + OPERATIONS_SHAPE
)

def reflection_item(reflection: Reflection) -> dict[str, Any]:
    """What the aggregator reads of one reflection copy (its insights and tags, not its ids or usage)."""
    return {
        "insights": [i.model_dump(mode="json") for i in reflection.insights],
        "entry_tags": [t.model_dump(mode="json") for t in reflection.entry_tags],
    }


def aggregator_messages(items: Sequence[Reflection], context: str = "") -> Messages:
    """Messages asking a model to aggregate the reflection copies of one subgroup into operations; ``context`` is
    the current playbook rendered within the context budget (``combee_core.playbook.render_playbook``)."""
    payload = {"task": "aggregate", "playbook": context, "items": numbered([reflection_item(r) for r in items])}
    return [{"role": "system", "content": AGGREGATOR_SYSTEM}, {"role": "user", "content": data_message(payload)}]


