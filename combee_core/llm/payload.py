"""Token caps on what a prompt carries: the trace a reflector reads and the context lines a role is shown.

A trace on the wire may hold up to 1 MiB (64 KiB per text field, 256 steps of 16 KiB); a prompt must not. Each cap
is in tokens of :func:`combee_core.playbook.estimate_tokens` (``ceil(chars / 4)``) of the payload's compact JSON.
What is cut is cut visibly: a shortened text keeps its head and tail around ``[... N chars omitted ...]``, dropped
steps are counted in ``steps_omitted``, dropped context lines in a last line saying how many, so the model (and a
person reading the call record) knows the payload was shortened.
"""

from __future__ import annotations

from typing import Any

import orjson

CHARS_PER_TOKEN = 4
MIN_TRACE_TOKENS = 2_000
"""Smallest trace cap: any valid trace, cut, fits in it (its ids, and its texts cut to 64 characters)."""
_MIN_TEXT = 64
"""Shortest a text is cut to before steps are dropped instead."""


def _size(value: Any) -> int:
    return len(orjson.dumps(value, option=orjson.OPT_SORT_KEYS))


def shorten(text: str, limit: int) -> str:
    """``text`` itself when at most ``limit`` characters, else its head and tail around an omission marker (the
    result may exceed ``limit`` by the marker's length)."""
    if len(text) <= limit:
        return text
    head = limit // 2
    tail = limit - head
    return f"{text[:head]}[... {len(text) - limit} chars omitted ...]{text[len(text) - tail:]}"


def _cap(value: Any, limit: int) -> Any:
    if isinstance(value, str):
        return shorten(value, limit)
    if isinstance(value, list):
        return [_cap(v, limit) for v in value]
    if isinstance(value, dict):
        return {k: _cap(v, limit) for k, v in value.items()}
    return value


def _longest(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, list):
        return max((_longest(v) for v in value), default=0)
    if isinstance(value, dict):
        return max((_longest(v) for v in value.values()), default=0)
    return 0


def fit_trace(trace: dict[str, Any], max_tokens: int) -> dict[str, Any]:
    """The trace payload within ``max_tokens``: unchanged when it fits; else every text field is cut to the longest
    common length that fits (the longest fields lose most), and when even short texts do not fit, the middle steps
    are dropped (the first and last kept, ``steps_omitted`` says how many went), then the last metadata entries
    (``metadata_omitted``). From :data:`MIN_TRACE_TOKENS` on, every valid trace fits."""
    budget = max_tokens * CHARS_PER_TOKEN
    if _size(trace) <= budget:
        return trace
    fixed = {key: trace[key] for key in ("trace_id", "task_id", "score", "success") if key in trace}
    texts = {key: value for key, value in trace.items() if key not in fixed}
    steps = list(texts.get("steps") or [])
    metadata = list((texts.get("metadata") or {}).items())
    omitted = {"steps_omitted": 0, "metadata_omitted": 0}
    while True:
        candidate = {**texts, "steps": steps, "metadata": dict(metadata), **{k: v for k, v in omitted.items() if v}}
        low, high = _MIN_TEXT, max(_MIN_TEXT, _longest(candidate))
        if _size({**fixed, **_cap(candidate, low)}) <= budget or not (steps or metadata):
            while low < high:  # the largest limit that fits (or the shortest, when none does and nothing is left)
                middle = (low + high + 1) // 2
                if _size({**fixed, **_cap(candidate, middle)}) <= budget:
                    low = middle
                else:
                    high = middle - 1
            return {**fixed, **_cap(candidate, low)}
        if steps:  # the middle steps go first, then the last metadata entries
            drop = max(1, len(steps) // 2)
            keep_head = (len(steps) - drop) // 2
            steps = steps[:keep_head] + steps[keep_head + drop:]
            omitted["steps_omitted"] += drop
        else:
            drop = max(1, len(metadata) // 2)
            metadata = metadata[:len(metadata) - drop]
            omitted["metadata_omitted"] += drop


def fit_lines(text: str, max_tokens: int) -> str:
    """The first lines of ``text`` within ``max_tokens``, and a last line saying how many were left out."""
    budget = max_tokens * CHARS_PER_TOKEN
    if len(text) <= budget:
        return text
    lines = text.split("\n")
    room = budget - len(_omitted(len(lines), max_tokens)) - 1
    kept: list[str] = []
    used = 0
    for line in lines:
        if used + len(line) + 1 > room:
            break
        kept.append(line)
        used += len(line) + 1
    return "\n".join([*kept, _omitted(len(lines) - len(kept), max_tokens)])


def _omitted(lines: int, max_tokens: int) -> str:
    return f"({lines} more lines not shown: over the {max_tokens}-token cap)"
