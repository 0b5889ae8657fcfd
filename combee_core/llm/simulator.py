"""A deterministic stand-in for an LLM, with a documented context-capacity model (see ``docs/simulator.md``).

This module is pure (no litellm import): :func:`simulate` reads the DATA block of a role prompt and returns the
text a model would, with token counts and a modelled latency. ``combee_core.llm.provider`` wraps it as the litellm
custom provider ``combee-sim``. Its figures are simulated, never measurements of a real model.

The synthetic task suite writes the lessons a reflection can recover into the trace feedback, one per line, with
:func:`format_lesson`; :func:`extract_lessons` reads them back::

    LESSON[formulas]: Use SUMIFS, not SUMIF, when there are two criteria.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import orjson
from pydantic import BaseModel, ConfigDict, Field

from combee_core import limits
from combee_core.errors import CombeeError
from combee_core.llm import sim_judge
from combee_core.llm.copy_controls import CONTROLS
from combee_core.llm.paraphrase import meaning_key, paraphrase
from combee_core.llm.prompts import read_data_block

PROVIDER = "combee-sim"
DEFAULT_MODEL = f"{PROVIDER}/default"

INPUT_COST_PER_TOKEN = 0.27e-6
"""USD per prompt token: DeepSeek-V3-class list price ($0.27 / M input tokens), for comparison only."""
OUTPUT_COST_PER_TOKEN = 1.10e-6
"""USD per completion token: DeepSeek-V3-class list price ($1.10 / M output tokens), for comparison only."""

CHARS_PER_TOKEN = 4

SIM_PARAM = "combee_sim"
"""Keyword of ``litellm.acompletion`` carrying ``{"config": SimulatorConfig dict, "attempt": n}`` to the provider."""
HIDDEN_PARAM = "combee_sim"
"""Key of ``response._hidden_params`` where the provider reports its modelled latency."""

_SECTION = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
_LESSON_LINE = re.compile(r"^[ \t]*(LESSON|GENERIC)\[([^\]\n]+)\]:[ \t]*(.*?)[ \t]*$", re.MULTILINE)
_SPACES = re.compile(r"\s+")
_OP_ORDER = {"ADD": 0, "UPDATE": 1, "MERGE": 2, "DELETE": 3, "TAG": 4}


class SimulatorConfig(BaseModel):
    """Settings of the simulated model. They travel with every call (never through a global)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    capacity: float = Field(default=12.0, gt=0, description="C: items one call can read without loss.")
    gamma: float = Field(default=2.0, gt=0, description="How fast per-item retention falls past C.")
    seed: int = Field(default=0, description="Seed of the deterministic retention draws.")
    fixed_latency_s: float = Field(default=0.4, ge=0, description="Per-call overhead (network, queue, first token).")
    per_prompt_token_s: float = Field(default=0.0002, ge=0, description="Prefill: 5,000 tokens/s.")
    per_completion_token_s: float = Field(default=0.02, ge=0, description="Decode: 50 tokens/s.")
    time_scale: float = Field(default=1.0, ge=0, description="Multiplier on the modelled latency.")
    mode: Literal["real", "virtual"] = Field(
        default="virtual", description="real: sleep the scaled latency; virtual: only report it."
    )
    output_style: Literal["json", "fenced", "messy"] = Field(
        default="json", description="json: bare JSON; fenced: in a code fence; messy: prose, fence, trailing comma."
    )
    fail_first_n: int = Field(default=0, ge=0, description="Test knob: attempts 1..n of every call raise a 503.")
    malformed_first_n: int = Field(
        default=0, ge=0, description="Test knob: attempts 1..n of every call answer with text holding no JSON."
    )
    paraphrases: int = Field(
        default=1, ge=1, le=len(("v0", "v1", "v2", "v3")),
        description="Wordings a reflection draws a lesson's text from (1: always the feedback's own words).",
    )
    reflection: Literal["lessons", "honest", "verbatim", "copy-prefixes", "copy-masked", "nouns"] = Field(
        default="lessons",
        description="lessons: copy the feedback's LESSON lines (default); honest: diagnose, reword, sometimes err, and "
        "aggregate without understanding wordings; the others: copying controls (combee_core.llm.copy_controls).",
    )
    suite_seed: int = Field(default=7, description="Honest mode: the seed of the suite whose registry it uses.")
    suite_families: int = Field(default=24, ge=1, description="Honest mode: that suite's number of families.")


class Lesson(NamedTuple):
    """One lesson line of a trace's feedback."""

    kind: Literal["lesson", "generic"]
    section: str
    text: str


@dataclass(frozen=True)
class SimulatedReply:
    """What the simulated model answers to one call."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    """Modelled latency, already multiplied by ``time_scale`` (the time a ``real``-mode call sleeps)."""
    unscaled_latency_s: float


class SimulatedFailure(CombeeError):
    """An injected provider failure (``fail_first_n``)."""


def is_sim_model(model: str) -> bool:
    """True for ``combee-sim/<anything>``."""
    return model.startswith(PROVIDER + "/")


def format_lesson(section: str, text: str, *, generic: bool = False) -> str:
    """One feedback line carrying a lesson the simulated reflector recovers (``LESSON[section]: text``)."""
    if not _SECTION.match(section) or len(section) > limits.MAX_SECTION_CHARS:
        raise ValueError(f"section {section!r} must be lower_snake_case, at most {limits.MAX_SECTION_CHARS} chars")
    flat = _SPACES.sub(" ", text).strip()
    if not flat:
        raise ValueError("lesson text is empty")
    if len(flat) > limits.MAX_INSIGHT_CHARS:
        raise ValueError(f"lesson text has {len(flat)} characters, more than {limits.MAX_INSIGHT_CHARS}")
    return f"{'GENERIC' if generic else 'LESSON'}[{section}]: {flat}"


def extract_lessons(feedback: str) -> list[Lesson]:
    """The ``LESSON[...]`` and ``GENERIC[...]`` lines of ``feedback``, in order, without repeats."""
    found: dict[tuple[str, str], Lesson] = {}
    for match in _LESSON_LINE.finditer(feedback or ""):
        kind: Literal["lesson", "generic"] = "generic" if match.group(1) == "GENERIC" else "lesson"
        section, text = match.group(2).strip(), match.group(3)
        if text and (section, text) not in found:
            found[(section, text)] = Lesson(kind, section, text)
    return list(found.values())


def paraphrase_variant(seed: int, trace_id: str, text: str, variants: int) -> int:
    """Which wording the reflection of ``trace_id`` uses for a lesson: a hash, uniform over ``variants``."""
    if variants <= 1:
        return 0
    return int(unit_draw(seed, text, f"paraphrase:{trace_id}") * variants)


# ---------------------------------------------------------------------------------------------- capacity model


def normalise_insight(text: str) -> str:
    """The identity of an insight for grouping: lower case, single spaces, no trailing punctuation."""
    return _SPACES.sub(" ", text).strip().lower().rstrip(".!;:, ")


def retention_rate(items: int, capacity: float = 12.0, gamma: float = 2.0) -> float:
    """r(m) = min(1, (C/m)^gamma): the chance one copy of an insight survives a call that reads m items."""
    if items <= 0:
        return 1.0
    return min(1.0, float((capacity / items) ** gamma))


def retention_probability(items: int, count: int, capacity: float = 12.0, gamma: float = 2.0) -> float:
    """1 - (1 - r(m))^c: the chance an insight carried by c of the m items survives the call."""
    return 1.0 - (1.0 - retention_rate(items, capacity, gamma)) ** count


def _digest(value: Any) -> str:
    return hashlib.sha256(orjson.dumps(value, option=orjson.OPT_SORT_KEYS)).hexdigest()


def call_fingerprint(items: Sequence[dict[str, Any]]) -> str:
    """Hash of a call's items, independent of their order and numbering."""
    hashes = sorted(_digest({k: v for k, v in item.items() if k != "item"}) for item in items)
    return _digest(hashes)


def unit_draw(seed: int, key: str, fingerprint: str) -> float:
    """A deterministic number in [0, 1) for (seed, insight, call): no RNG state anywhere."""
    digest = hashlib.sha256(f"{seed}\x1f{key}\x1f{fingerprint}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def _retained(config: SimulatorConfig, key: str, count: int, m: int, fingerprint: str) -> bool:
    probability = retention_probability(m, count, config.capacity, config.gamma)
    return probability >= 1.0 or unit_draw(config.seed, key, fingerprint) < probability


# ---------------------------------------------------------------------------------------------- roles


def _outcome(trace: dict[str, Any]) -> bool | None:
    if trace.get("success") is not None:
        return bool(trace["success"])
    if trace.get("score") is not None:
        return float(trace["score"]) >= 0.5
    return None


def simulate_reflection(data: dict[str, Any], config: SimulatorConfig | None = None) -> dict[str, Any]:
    """Reflector: the feedback's lessons become insights, each in one of ``config.paraphrases`` wordings chosen by a
    hash of (seed, trace id, lesson) (honest mode: ``combee_core.llm.honest``; the copying controls:
    ``combee_core.llm.copy_controls``); ``used_entries`` are tagged by the run's outcome."""
    config = config or SimulatorConfig()
    trace = data.get("trace") or {}
    trace_id = str(trace.get("trace_id", ""))
    if config.reflection == "honest":
        # only honest mode loads the registry: curation imports this module (tests/unit/test_honest_mode.py); no cycle
        from combee_core.llm.honest import honest_insights  # (honest.py never imports this module)

        insights = honest_insights(trace, config)
    elif config.reflection != "lessons":
        insights = CONTROLS[config.reflection](trace)
    else:
        insights = []
        for lesson in extract_lessons(trace.get("feedback", ""))[: limits.MAX_INSIGHTS_PER_REFLECTION]:
            variant = paraphrase_variant(config.seed, trace_id, lesson.text, config.paraphrases)
            worded = paraphrase(lesson.text, variant)
            insights.append({"section": lesson.section, "content": worded[: limits.MAX_INSIGHT_CHARS]})
    outcome = _outcome(trace)
    tag = "neutral" if outcome is None else ("helpful" if outcome else "harmful")
    used = str((trace.get("metadata") or {}).get("used_entries") or "")
    entry_ids = list(dict.fromkeys(e.strip() for e in used.split(",") if e.strip()))[: limits.MAX_TAGS_PER_REFLECTION]
    return {"insights": insights, "entry_tags": [{"entry_id": e, "tag": tag} for e in entry_ids]}


class _Group:
    __slots__ = ("count", "support", "sections", "contents")

    def __init__(self) -> None:
        self.count = 0
        self.support = 0
        self.sections: Counter[str] = Counter()
        self.contents: set[str] = set()

    def representative(self) -> tuple[str, str]:
        top = max(self.sections.values())
        section = min(s for s, n in self.sections.items() if n == top)
        return section, min(self.contents)


_ENTRY_LINE = re.compile(r"^\[([^\]\n]+)\] helpful=\d+ harmful=\d+ :: (.*)$", re.MULTILINE)


def _exact_key(text: str) -> tuple[str, ...]:
    """Honest mode's grouping: the text itself (normalised), no understanding of wordings."""
    return (normalise_insight(text),)


def held_lessons(playbook_text: str, key_of: Any = meaning_key) -> dict[tuple[str, ...], str]:
    """The entries a rendered playbook shows (``[id] helpful=X harmful=Y :: content`` lines), by ``key_of``
    (:func:`meaning_key`); the first entry wins when two share a key."""
    held: dict[tuple[str, ...], str] = {}
    for match in _ENTRY_LINE.finditer(playbook_text or ""):
        held.setdefault(key_of(match.group(2)), match.group(1))
    return held


def _merge(config: SimulatorConfig, items: Sequence[dict[str, Any]], adds_of: Any, playbook_text: str = "") -> dict[
    str, Any
]:
    """The capacity model shared by aggregator and reducer calls.

    Lessons are grouped by :func:`meaning_key` (the model merges wordings of one lesson it reads together). With a
    playbook in the prompt, a kept lesson the playbook already holds becomes a ``TAG helpful`` of that entry (count
    = its support) instead of an ``ADD``; without one, it is proposed again."""
    m = len(items)
    fingerprint = call_fingerprint(items)
    key_of = meaning_key if config.reflection == "lessons" else _exact_key
    held = held_lessons(playbook_text, key_of)
    groups: dict[tuple[str, ...], _Group] = {}
    others: dict[str, list[Any]] = {}  # canonical JSON of UPDATE/MERGE/DELETE -> [count, op]
    tags: Counter[tuple[str, str]] = Counter()
    for item in items:
        seen: set[tuple[str, ...]] = set()
        for section, content, support in adds_of(item):
            key = key_of(content)
            group = groups.setdefault(key, _Group())
            group.support += support
            group.sections[section] += 1
            group.contents.add(content)
            if key not in seen:
                group.count += 1
                seen.add(key)
        seen_ops: set[str] = set()
        for op in item.get("operations", []):
            kind = op.get("op")
            if kind == "TAG":
                tags[(op["entry_id"], op["tag"])] += int(op.get("count", 1))
            elif kind in ("UPDATE", "MERGE", "DELETE"):
                canonical = orjson.dumps(op, option=orjson.OPT_SORT_KEYS).decode()
                entry = others.setdefault(canonical, [0, op])
                if canonical not in seen_ops:
                    entry[0] += 1
                    seen_ops.add(canonical)
        for tag in item.get("entry_tags", []):
            tags[(tag["entry_id"], tag["tag"])] += 1
    operations: list[dict[str, Any]] = []
    for key, group in groups.items():
        section, content = group.representative()
        if _retained(config, normalise_insight(content), group.count, m, fingerprint):
            if key in held:
                tags[(held[key], "helpful")] += group.support
            else:
                operations.append({"op": "ADD", "section": section, "content": content, "support": group.support})
    for canonical, (count, op) in others.items():
        if _retained(config, canonical, count, m, fingerprint):
            operations.append(op)
    for (entry_id, tag), count in tags.items():
        operations.append({"op": "TAG", "entry_id": entry_id, "tag": tag, "count": count})
    operations.sort(key=_sort_key)
    return {"operations": operations}


def _sort_key(op: dict[str, Any]) -> tuple[int, str, str, bytes]:
    """ADDs by (section, content), then UPDATE/MERGE/DELETE by their JSON, then TAGs by (entry_id, tag)."""
    kind = op["op"]
    if kind == "ADD":
        return (0, op["section"], op["content"], b"")
    if kind == "TAG":
        return (4, op["entry_id"], op["tag"], b"")
    return (_OP_ORDER.get(kind, 9), "", "", orjson.dumps(op, option=orjson.OPT_SORT_KEYS))


def _reflection_adds(item: dict[str, Any]) -> Iterable[tuple[str, str, int]]:
    for insight in item.get("insights", []):
        yield insight["section"], insight["content"], 1


def _partial_adds(item: dict[str, Any]) -> Iterable[tuple[str, str, int]]:
    for op in item.get("operations", []):
        if op.get("op") == "ADD":
            yield op["section"], op["content"], int(op.get("support", 1))


def simulate_aggregation(data: dict[str, Any], config: SimulatorConfig) -> dict[str, Any]:
    """Aggregator: insights of the m copies grouped; each kept with probability 1-(1-r(m))^c; tags summed."""
    return _merge(config, data.get("items") or [], _reflection_adds, str(data.get("playbook") or ""))


def simulate_reduction(data: dict[str, Any], config: SimulatorConfig) -> dict[str, Any]:
    """Reducer: the same capacity model over m partials; ADD support and TAG counts summed."""
    return _merge(config, data.get("items") or [], _partial_adds, str(data.get("playbook") or ""))


# ---------------------------------------------------------------------------------------------- the call


def estimate_tokens(text: str) -> int:
    """ceil(len(text) / 4): a rough token count (no tokenizer)."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def modelled_latency(prompt_tokens: int, completion_tokens: int, config: SimulatorConfig) -> float:
    """fixed + prompt_tokens * prefill time + completion_tokens * decode time (unscaled seconds)."""
    return (
        config.fixed_latency_s
        + prompt_tokens * config.per_prompt_token_s
        + completion_tokens * config.per_completion_token_s
    )


def _render(answer: dict[str, Any], style: str) -> str:
    body = orjson.dumps(answer).decode()
    if style == "fenced":
        return f"```json\n{body}\n```"
    if style == "messy":
        return f"Here is the result:\n```json\n{body[:-1]},}}\n```\nLet me know if you need anything else."
    return body


MALFORMED_TEXT = "I am sorry, I could not produce the requested answer for this batch."


def simulate(messages: Sequence[dict[str, Any]], config: SimulatorConfig, attempt: int = 1) -> SimulatedReply:
    """Answer one call as the simulated model. ``attempt`` (1-based) drives the failure-injection knobs.

    Raises :class:`SimulatedFailure` for an injected failure, ``ValueError`` for no DATA block with a known task."""
    if attempt <= config.fail_first_n:
        raise SimulatedFailure(f"injected provider failure (attempt {attempt} of {config.fail_first_n} failing)")
    prompt_text = "\n".join(str(m.get("content", "")) for m in messages)
    if attempt <= config.malformed_first_n:
        text = MALFORMED_TEXT
    else:
        data = read_data_block(messages)
        task = data.get("task")
        if task == "reflect":
            answer = simulate_reflection(data, config)
        elif task == "aggregate":
            answer = simulate_aggregation(data, config)
        elif task == "reduce":
            answer = simulate_reduction(data, config)
        elif task in ("agent", "judge"):  # the LLM judge evaluator's two roles (combee_core/llm/sim_judge.py)
            answer = sim_judge.simulate_call(task, data, config.seed)
        else:
            raise ValueError(f"unknown task {task!r} in the DATA block")
        text = answer["answer"] if task == "agent" else _render(answer, config.output_style)
    prompt_tokens, completion_tokens = estimate_tokens(prompt_text), estimate_tokens(text)
    unscaled = modelled_latency(prompt_tokens, completion_tokens, config)
    return SimulatedReply(text, prompt_tokens, completion_tokens, unscaled * config.time_scale, unscaled)
