"""The reflector role (the paper's Map: one call per trace): its prompt, and what its answer becomes (a
:class:`~combee_core.models.Reflection`). The call itself, its retries and its record are ``roles.LLMRoles``'."""

from __future__ import annotations

import hashlib
import logging
from typing import Any

from combee_core.llm.parsing import ParsedReflection
from combee_core.llm.payload import fit_lines, fit_trace
from combee_core.llm.prompts import (
    ANSWER_CONTENT_CHARS,
    ANSWER_MAX_ITEMS,
    ANSWER_RULE,
    CONTEXT_TOKENS,
    DATA_FENCE,
    DIAGNOSIS_CHARS,
    TRACE_TOKENS,
    Messages,
    data_message,
)
from combee_core.models import Reflection, Trace, Usage
from combee_core.playbook.outcomes import trace_outcome
from combee_core.serve.scopes import own_entry_id, split_used

logger = logging.getLogger(__name__)

SHAPE_REFLECT = (
    '{"diagnosis": {"what_went_wrong": "<the specific mistake, or what made the run succeed>",\n'
    '               "root_cause": "<why it happened: the concept, rule or fact the agent missed>",\n'
    '               "correct_approach": "<what the agent should have done instead>"},\n'
    f' "insights": [{{"section": "<lower_snake_case section>", "content": "<one reusable lesson in your own words, '
    f'<= {ANSWER_CONTENT_CHARS} chars>"}}],\n'
    ' "entry_tags": [{"entry_id": "<id of an entry in used_entries>", "tag": "helpful" | "harmful" | "neutral"}]}'
)
REFLECTOR_SYSTEM = (
    "You are the reflector of a prompt-learning system. An agent ran one task with a playbook of learned lessons.\n"
    "Read its trace (task input, the agent's output and steps, the environment feedback, the score) and diagnose\n"
    "the run before you write any lesson:\n"
    "1. what_went_wrong: the specific mistake in the agent's output or reasoning (for a success, what made it work);\n"
    "2. root_cause: why it happened - the concept, rule or fact the agent missed or misapplied, not the symptom;\n"
    "3. correct_approach: what the agent should have done instead, concretely.\n"
    "Then state the insights that follow from your diagnosis: specific, actionable, reusable beyond this one task,\n"
    "each a general rule in your own words (do not copy sentences from the trace; feedback can be wrong, so keep a\n"
    "lesson only if your diagnosis supports it), each under a short lower_snake_case section.\n"
    "used_entries holds the playbook entries the agent used, one per line as [id] helpful=X harmful=Y :: content.\n"
    "Tag each of them: helpful when it contributed to success, harmful when it misled the agent, neutral otherwise;\n"
    "tag no other id. Do not restate as a new insight a lesson one of those entries already holds: tag it instead.\n"
    f"At most {ANSWER_MAX_ITEMS['insights']} insights of at most {ANSWER_CONTENT_CHARS} characters each, each "
    f"diagnosis field at most {DIAGNOSIS_CHARS}.\n"
    "Empty insights and tags are a valid answer when there is nothing to learn.\n"
    + DATA_FENCE
    + ANSWER_RULE
    + SHAPE_REFLECT
)


def trace_payload(trace: Trace) -> dict[str, Any]:
    """What the reflector reads of a trace (everything a model can learn from; no wire bookkeeping)."""
    return {
        "trace_id": trace.trace_id,
        "task_id": trace.task_id,
        "input": trace.input,
        "output": trace.output,
        "feedback": trace.feedback,
        "score": trace.score,
        "success": trace.success,
        "steps": [step.model_dump(mode="json", exclude_none=True) for step in trace.steps],
        "metadata": dict(trace.metadata),
    }


def used_entry_ids(trace: Trace) -> list[str]:
    """The ids of its own playbook's entries the agent reports it used (``metadata.used_entries``, comma-separated),
    in order, without repeats; ``<playbook_id>/<id>`` (a composed view's name) as ``<id>``, another scope's left out
    (inherited: not learned from here, docs/scopes.md)."""
    used = str(trace.metadata.get("used_entries") or "")
    return split_used(trace.playbook_id, [part.strip() for part in used.split(",") if part.strip()])[0]


def reflector_messages(trace: Trace, playbook_text: str | None = None, *, context_tokens: int = CONTEXT_TOKENS,
                       trace_tokens: int = TRACE_TOKENS) -> Messages:
    """Messages asking a model to reflect on one trace, with the rendered playbook entries the agent used
    (``playbook_text``, ``[id] helpful=X harmful=Y :: content`` lines; empty when it used none). The entries are
    cut to ``context_tokens`` and the trace to ``trace_tokens`` (``combee_core.llm.payload``), visibly."""
    payload = {"task": "reflect", "used_entries": fit_lines(playbook_text or "", context_tokens),
               "trace": fit_trace(trace_payload(trace), trace_tokens)}
    return [{"role": "system", "content": REFLECTOR_SYSTEM}, {"role": "user", "content": data_message(payload)}]




def reflection_id_for(trace_id: str) -> str:
    """The deterministic id of the reflection of a trace."""
    return "r-" + hashlib.sha256(trace_id.encode()).hexdigest()[:16]


def reflection_from(parsed: ParsedReflection, trace: Trace, *, model: str, usage: Usage,
                    latency_s: float) -> Reflection:
    """The reflection a parsed answer about ``trace`` makes: its tags kept only for entries the agent used (a
    composed view's ``<playbook_id>/<id>`` read as ``<id>``), the trace's outcome for those entries."""
    used = set(used_entry_ids(trace))
    tags = [tag.model_copy(update={"entry_id": own}) for tag in parsed.entry_tags
            if (own := own_entry_id(trace.playbook_id, tag.entry_id)) in used]
    if len(tags) < len(parsed.entry_tags):
        logger.info("reflector: %d tag(s) of entries trace %s did not use dropped (a reflection tags only the "
                    "entries its agent used)", len(parsed.entry_tags) - len(tags), trace.trace_id)
    return Reflection(
        reflection_id=reflection_id_for(trace.trace_id),
        trace_id=trace.trace_id,
        playbook_id=trace.playbook_id,
        seen_version=trace.playbook_version,
        insights=parsed.insights,
        entry_tags=tags,
        model=model,
        usage=usage,
        latency_s=latency_s,
        trace_digest=trace.digest(),
        outcome=trace_outcome(trace, used),
    )
