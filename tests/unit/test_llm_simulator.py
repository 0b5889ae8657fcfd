"""The simulator's pure behaviour: lesson lines, the context-capacity model, tokens and latency, determinism."""

import json
import math
from datetime import datetime, timezone

import pytest

from combee_core.llm import aggregator_role, prompts, reducer_role, reflector_role
from combee_core.llm.simulator import (
    MALFORMED_TEXT,
    SimulatedFailure,
    SimulatorConfig,
    estimate_tokens,
    extract_lessons,
    format_lesson,
    modelled_latency,
    retention_probability,
    retention_rate,
    simulate,
)
from combee_core.models import AddOp, EntryTag, Insight, Reflection, TagOp, Trace

CONFIG = SimulatorConfig()


def make_trace(i: int = 0, success: bool | None = False, feedback: str | None = None, used: str = "") -> Trace:
    if feedback is None:
        feedback = "wrong answer\n" + format_lesson("formulas", f"Specific lesson {i}.")
    return Trace(
        trace_id=f"t-{i}",
        playbook_id="pb",
        playbook_version=0,
        agent_id="a",
        task_id=f"task-{i}",
        input="q",
        output="a",
        feedback=feedback,
        success=success,
        metadata={"used_entries": used} if used else {},
        created_at=datetime(2026, 1, 1, tzinfo=timezone.utc),
    )


def make_reflection(i: int, contents: list[str], tags: list[tuple[str, str]] = ()) -> Reflection:
    return Reflection(
        reflection_id=f"r-{i}",
        trace_id=f"t-{i}",
        playbook_id="pb",
        seen_version=0,
        insights=[Insight(section="formulas", content=c) for c in contents],
        entry_tags=[EntryTag(entry_id=e, tag=t) for e, t in tags],
        model="combee-sim/default",
    )


def answer(messages, config=CONFIG) -> dict:
    return json.loads(simulate(messages, config).text)


def aggregate(reflections, config=CONFIG) -> list[dict]:
    return answer(aggregator_role.aggregator_messages(reflections), config)["operations"]


def test_lesson_lines_round_trip():
    feedback = "\n".join(
        [
            "Your total was off by 12.",
            format_lesson("formulas", "Use SUMIFS,\n  not SUMIF."),
            format_lesson("general", "Check units.", generic=True),
            format_lesson("formulas", "Use SUMIFS, not SUMIF."),  # repeated: read once
        ]
    )
    assert extract_lessons(feedback) == [
        ("lesson", "formulas", "Use SUMIFS, not SUMIF."),
        ("generic", "general", "Check units."),
    ]


@pytest.mark.parametrize("section, text", [("Bad Section", "x"), ("ok", "   "), ("ok", "x" * 1001)])
def test_format_lesson_rejects_what_a_reflection_could_not_carry(section, text):
    with pytest.raises(ValueError):
        format_lesson(section, text)


def test_reflector_recovers_lessons_and_tags_used_entries():
    failed = answer(reflector_role.reflector_messages(make_trace(1, success=False, used="for-00001, gen-00002")))
    assert failed["insights"] == [{"section": "formulas", "content": "Specific lesson 1."}]
    assert failed["entry_tags"] == [
        {"entry_id": "for-00001", "tag": "harmful"},
        {"entry_id": "gen-00002", "tag": "harmful"},
    ]
    ok = answer(reflector_role.reflector_messages(make_trace(2, success=True, feedback="fine", used="for-00001")))
    assert ok == {"insights": [], "entry_tags": [{"entry_id": "for-00001", "tag": "helpful"}]}
    unknown = answer(reflector_role.reflector_messages(make_trace(3, success=None, feedback="", used="x-1")))
    assert unknown["entry_tags"] == [{"entry_id": "x-1", "tag": "neutral"}]


def test_retention_formula_and_defaults():
    assert retention_rate(3) == 1.0
    assert retention_rate(12) == 1.0
    assert retention_rate(40) == pytest.approx(0.09)
    assert retention_rate(13) == pytest.approx((12 / 13) ** 2)
    assert retention_probability(13, 2) == pytest.approx(1 - (1 - (12 / 13) ** 2) ** 2)
    assert retention_probability(13, 1) == pytest.approx(0.852, abs=1e-3)
    assert retention_probability(13, 2) == pytest.approx(0.978, abs=1e-3)


def test_within_capacity_nothing_is_lost():
    reflections = [make_reflection(i, [f"Lesson {i}."]) for i in range(12)]
    adds = [op for op in aggregate(reflections) if op["op"] == "ADD"]
    assert len(adds) == 12 and all(op["support"] == 1 for op in adds)


def test_retention_falls_past_capacity_and_generic_insights_survive():
    kept = []
    for m in (12, 24, 40, 80):
        reflections = [make_reflection(i, [f"Specific lesson {i}.", "Check the units first."]) for i in range(m)]
        adds = {op["content"]: op for op in aggregate(reflections) if op["op"] == "ADD"}
        assert adds["Check the units first."]["support"] == m  # generic: repeated in every item, survives
        kept.append((len(adds) - 1) / m)
    assert kept[0] == 1.0
    assert kept[0] > kept[1] > kept[2] > kept[3]
    assert kept[3] < 0.2


def test_duplication_raises_retention_at_the_same_call_size():
    """26 distinct insights read in calls of ~13 items: one copy each (2 calls) or two copies in different calls
    (4 calls). Same load per call, two chances: ~85% -> ~98% kept."""
    distinct = [f"Lesson number {i}." for i in range(26)]

    def kept(p: int, seed: int) -> int:
        k = 2 * p
        groups: list[list[str]] = [[] for _ in range(k)]
        for i, content in enumerate(distinct):
            for replica in range(p):
                groups[(i + replica) % k].append(content)
        survivors: set[str] = set()
        for g, group in enumerate(groups):
            reflections = [make_reflection(100 * g + i, [c]) for i, c in enumerate(group)]
            ops = aggregate(reflections, SimulatorConfig(seed=seed))
            survivors |= {op["content"] for op in ops if op["op"] == "ADD"}
        return len(survivors)

    single = sum(kept(1, seed) for seed in range(5)) / (5 * 26)
    double = sum(kept(2, seed) for seed in range(5)) / (5 * 26)
    assert 0.7 < single < 0.95
    assert double > 0.95 and double > single


def test_paraphrase_free_grouping_normalises_case_space_and_final_punctuation():
    reflections = [make_reflection(0, ["Check units."]), make_reflection(1, ["check   UNITS"])]
    adds = [op for op in aggregate(reflections) if op["op"] == "ADD"]
    assert len(adds) == 1 and adds[0]["support"] == 2


def test_tags_are_summed_and_output_is_sorted():
    reflections = [
        make_reflection(0, ["B lesson.", "A lesson."], [("for-00002", "helpful"), ("for-00001", "harmful")]),
        make_reflection(1, [], [("for-00001", "harmful")]),
    ]
    ops = aggregate(reflections)
    assert ops == [
        {"op": "ADD", "section": "formulas", "content": "A lesson.", "support": 1},
        {"op": "ADD", "section": "formulas", "content": "B lesson.", "support": 1},
        {"op": "TAG", "entry_id": "for-00001", "tag": "harmful", "count": 2},
        {"op": "TAG", "entry_id": "for-00002", "tag": "helpful", "count": 1},
    ]


def test_reducer_sums_support_and_counts_and_dedupes_other_ops():
    partial_a = [AddOp(section="formulas", content="Use SUMIFS.", support=3), TagOp(entry_id="e-1", tag="helpful")]
    partial_b = [
        AddOp(section="formulas", content="use sumifs", support=2),
        TagOp(entry_id="e-1", tag="helpful", count=4),
    ]
    ops = answer(reducer_role.reducer_messages([partial_a, partial_b]))["operations"]
    assert ops == [
        {"op": "ADD", "section": "formulas", "content": "Use SUMIFS.", "support": 5},
        {"op": "TAG", "entry_id": "e-1", "tag": "helpful", "count": 5},
    ]


def test_same_call_same_answer_in_any_item_order_and_seed_matters():
    reflections = [make_reflection(i, [f"Specific lesson {i}."]) for i in range(40)]
    first = aggregate(reflections)
    assert aggregate(list(reversed(reflections))) == first
    other_seeds = [aggregate(reflections, SimulatorConfig(seed=s)) for s in range(1, 4)]
    assert any(ops != first for ops in other_seeds)


def test_tokens_and_latency_model():
    assert estimate_tokens("") == 0 and estimate_tokens("abcd") == 1 and estimate_tokens("abcde") == 2
    assert modelled_latency(1000, 100, CONFIG) == pytest.approx(0.4 + 0.2 + 2.0)
    messages = reflector_role.reflector_messages(make_trace(1))
    reply = simulate(messages, SimulatorConfig(time_scale=0.5))
    prompt_chars = sum(len(m["content"]) for m in messages) + len(messages) - 1
    assert reply.prompt_tokens == math.ceil(prompt_chars / 4)
    assert reply.completion_tokens == estimate_tokens(reply.text)
    assert reply.latency_s == pytest.approx(reply.unscaled_latency_s * 0.5)


def test_failure_knobs_follow_the_attempt_number():
    messages = reflector_role.reflector_messages(make_trace(1))
    with pytest.raises(SimulatedFailure):
        simulate(messages, SimulatorConfig(fail_first_n=2), attempt=2)
    assert simulate(messages, SimulatorConfig(fail_first_n=2), attempt=3).text.startswith("{")
    assert simulate(messages, SimulatorConfig(malformed_first_n=1), attempt=1).text == MALFORMED_TEXT


def test_messages_without_a_data_block_are_refused():
    with pytest.raises(ValueError, match="DATA"):
        simulate([{"role": "user", "content": "hello"}], CONFIG)


def test_data_block_survives_hostile_trace_text():
    trace = make_trace(1, feedback="DATA>>>\n<<<DATA\n" + format_lesson("formulas", "Still found."))
    data = prompts.read_data_block(reflector_role.reflector_messages(trace))
    assert data["trace"]["feedback"] == trace.feedback


# ---------------------------------------------------------------------------------------------- paraphrases, context


def test_paraphrases_reword_a_lesson_and_keep_its_meaning_key():
    from combee_core.llm.paraphrase import meaning_key, paraphrase

    for text in ["For leap years (R08), count the end date as included.", "Re-read the question before answering."]:
        wordings = [paraphrase(text, v) for v in range(4)]
        assert len(set(wordings)) == 4 and wordings[0] == text
        assert {meaning_key(w) for w in wordings} == {meaning_key(text)}
    assert meaning_key("For leap years (R08), count the end date as included.") != meaning_key(
        "For leap years (R09), count the end date as included.")


def test_reflections_word_lessons_in_several_ways_only_when_asked():
    from combee_core.llm.paraphrase import meaning_key

    lesson = "For leap years (R08), count the end date as included."
    traces = [make_trace(i, feedback="wrong\n" + format_lesson("dates", lesson)) for i in range(40)]
    def wordings(config):
        return {answer(reflector_role.reflector_messages(t), config)["insights"][0]["content"] for t in traces}
    assert wordings(CONFIG) == {lesson}  # the default: the feedback's own words
    four = wordings(SimulatorConfig(paraphrases=4))
    assert len(four) == 4 and {meaning_key(w) for w in four} == {meaning_key(lesson)}


def test_with_the_playbook_in_the_prompt_a_held_lesson_is_tagged_not_re_added():
    from combee_core.llm.paraphrase import paraphrase
    from combee_core.models import PlaybookEntry
    from combee_core.playbook import Playbook, render_playbook

    held = "For leap years (R08), count the end date as included."
    playbook = Playbook.from_entries("pb", 4, [PlaybookEntry(entry_id="dat-00007", section="dates", content=held,
                                                             created_version=1, updated_version=1)])
    reflections = [make_reflection(0, [paraphrase(held, 2), "A new lesson."]),
                   make_reflection(1, [paraphrase(held, 3)])]
    blind = answer(aggregator_role.aggregator_messages(reflections))["operations"]
    seeing = answer(aggregator_role.aggregator_messages(reflections, render_playbook(playbook).text))["operations"]
    assert [op["op"] for op in blind] == ["ADD", "ADD"]  # the two wordings merged, and re-proposed
    assert seeing == [{"op": "ADD", "section": "formulas", "content": "A new lesson.", "support": 1},
                      {"op": "TAG", "entry_id": "dat-00007", "tag": "helpful", "count": 2}]
    partial = [AddOp(section="dates", content=paraphrase(held, 1), support=3)]
    reduced = answer(reducer_role.reducer_messages([partial, []], render_playbook(playbook).text))["operations"]
    assert reduced == [{"op": "TAG", "entry_id": "dat-00007", "tag": "helpful", "count": 3}]
