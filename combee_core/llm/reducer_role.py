"""The reducer role: merges the partial updates of one batch (or one level of the scan) into one list of playbook
operations. Its prompt; the call, its retries and its record are ``roles.LLMRoles``'."""

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
from combee_core.models import Operation

REDUCER_SYSTEM = (
    "You are the reducer of a prompt-learning system. You receive numbered partial updates, each a list of playbook\n"
    "operations proposed for part of one batch, and the current playbook (one entry per line as\n"
    "[id] helpful=X harmful=Y :: content, under ## section headings; it may be empty). Merge them into one list of\n"
    "CHANGES to the playbook: combine ADDs of the same lesson, in any wording (support = the sum of their\n"
    "supports); turn an ADD of a lesson the playbook already holds into a TAG helpful of that entry (count = its\n"
    "support); sum TAG counts per entry and verdict; keep UPDATE, MERGE and DELETE operations once, only for ids\n"
    "shown in the playbook, and resolve conflicts in favour of the best-supported operation.\n"
    "Keep every distinct new lesson; do not drop a lesson because only one partial proposes it.\n"
    "An ADD you keep although the playbook holds an entry close to it: if it is a different lesson, say so with\n"
    '"distinct_from": ["<that entry id>"] in the ADD; without it, the close entry is taken for the same lesson.\n'
    + OPERATION_LIMITS
    + DATA_FENCE
    + ANSWER_RULE
    + OPERATIONS_SHAPE
)


def operations_item(operations: Sequence[Operation]) -> dict[str, Any]:
    """What the reducer reads of one partial update."""
    return {"operations": [op.model_dump(mode="json") for op in operations]}


def reducer_messages(partials: Sequence[Sequence[Operation]], context: str = "") -> Messages:
    """Messages asking a model to merge partial updates (one item per partial) into one list of operations, given
    the current playbook rendered within the context budget (``context``)."""
    payload = {"task": "reduce", "playbook": context, "items": numbered([operations_item(p) for p in partials])}
    return [{"role": "system", "content": REDUCER_SYSTEM}, {"role": "user", "content": data_message(payload)}]


