"""Honest mode (docs/simulator.md, "Honest mode"): the registry knows what each generated text states, curation never
imports it, scoring credits meaning (tag or no tag, any wording or section), the feedback is about the task instance
and never a text scoring credits, the reflector and feedback follow their documented rates, the copying controls
state nothing, and the aggregator does not merge wordings."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from combee_core.llm.copy_controls import CONTROLS, mask_values, verbatim_insights
from combee_core.llm.honest import feedback_kind, honest_insights
from combee_core.llm.reflector_role import trace_payload
from combee_core.llm.simulator import SimulatorConfig, simulate_aggregation, simulate_reflection
from combee_core.models import PlaybookEntry
from combee_core.sim import honest_suite
from combee_core.sim.instances import TEMPLATES, instance_kind, instance_line
from combee_core.sim.sim_registry import RegistryError, Statement, build_registry, normalise_text, registry_for
from combee_core.sim.suite import HonestFeedback
from combee_core.sim.task_suite import build_suite, expected_accuracy, run_task
from combee_core.sim.wordings import ACTION_PHRASINGS

ROOT = Path(__file__).resolve().parents[2]
HONEST_MODULES = {"combee_core.sim.sim_registry", "combee_core.sim.honest_suite", "combee_core.llm.honest",
                  "combee_core.sim.wordings", "combee_core.sim.instances"}
SUITE = build_suite(seed=7, feedback="honest")
REGISTRY = registry_for(7, 24)


def _entries(texts: list[str], section: str = "general") -> list[PlaybookEntry]:
    return [PlaybookEntry(entry_id=f"e{n}", section=section, content=text, created_version=1, updated_version=1)
            for n, text in enumerate(texts)]


# ---------------------------------------------------------------------------------------------- layering


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, *, top_level_only: bool) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return {name for name in found if name.startswith("combee_core")}


def _curation_modules() -> dict[str, Path]:
    paths = [*(ROOT / "combee_core" / "playbook").rglob("*.py"), ROOT / "combee_core" / "reduce" / "reduction.py",
             *(ROOT / "combee_core" / "processors").rglob("*.py")]
    return {_module(p): p for p in paths}


def test_curation_never_imports_the_registry_or_the_honest_scoring():
    """Directly (anywhere in the file, functions included) and through the module-level imports of what it
    imports: loading any curation module never loads the registry."""
    every = {_module(p): p for p in (ROOT / "combee_core").rglob("*.py")}
    for name, path in _curation_modules().items():
        assert not (_imports(path, top_level_only=False) & HONEST_MODULES), name
    seen: set[str] = set()
    todo = list(_curation_modules())
    while todo:
        name = todo.pop()
        if name in seen or name not in every:
            continue
        seen.add(name)
        todo.extend(_imports(every[name], top_level_only=True))
    assert not (seen & HONEST_MODULES)


# ---------------------------------------------------------------------------------------------- registry


@pytest.mark.parametrize("seed", [0, 7, 11])
def test_registry_is_unambiguous_and_complete(seed):
    suite = build_suite(32, seed=seed)
    registry = build_registry(suite.families)
    for family in suite.families:
        for polarity in (1, -1):
            texts = registry.wordings[(family.family_id, polarity)]
            assert len(set(map(normalise_text, texts))) == 60
            assert all(family.family_id not in text for text in texts)
            assert {registry.lookup(t) for t in texts} == {Statement("rule", family.family_id, polarity)}
        assert registry.lookup(family.insight) == Statement("rule", family.family_id, 1)
        assert registry.lookup(family.harmful_insight) == Statement("rule", family.family_id, -1)


def test_registry_refuses_a_text_that_would_state_two_things():
    family = SUITE.families[0]
    with pytest.raises(RegistryError):
        build_registry([family, family.__class__("R99", family.section, family.insight.replace("R00", "R99"), 0.3)])


# ---------------------------------------------------------------------------------------------- scoring


def test_scoring_credits_meaning_not_the_tag_or_the_wording():
    tagged = [f.insight for f in SUITE.families]
    untagged = [f.insight.replace(f" ({f.family_id})", "") for f in SUITE.families]
    reworded = [REGISTRY.wordings[(f.family_id, 1)][-1] for f in SUITE.families]
    opposite = [REGISTRY.wordings[(f.family_id, -1)][5] for f in SUITE.families]
    held_out = SUITE.held_out
    empty = honest_suite.expected_accuracy(SUITE, held_out, [])
    assert round(empty, 3) == 0.346
    for texts in (tagged, untagged, reworded):
        assert honest_suite.expected_accuracy(SUITE, held_out, _entries(texts)) == pytest.approx(0.95)
    assert honest_suite.expected_accuracy(SUITE, held_out, _entries(opposite)) == pytest.approx(0.05)
    assert honest_suite.expected_accuracy(SUITE, held_out, _entries(reworded + opposite)) == pytest.approx(0.5)
    assert expected_accuracy(SUITE, held_out, _entries(untagged)) == pytest.approx(0.95)  # suite dispatches
    assert expected_accuracy(build_suite(seed=7), held_out, _entries(untagged)) == pytest.approx(empty)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 23), unique=True), st.integers(0, 59), st.sampled_from(["arithmetic", "general"]))
def test_an_entry_helps_exactly_the_families_whose_rule_it_states(families, wording, section):
    texts = [REGISTRY.wordings[(SUITE.families[i].family_id, 1)][wording] for i in families]
    held = honest_suite.holdings(SUITE, _entries(texts, section))
    assert set(held) == {SUITE.families[i].family_id for i in families}
    assert all(h.right and not h.wrong for h in held.values())


# ---------------------------------------------------------------------------------------------- feedback, reflector


def _failed_traces(count: int = 480):
    traces = [run_task(SUITE, t, [], playbook_id="pb", playbook_version=0, agent_id="a", attempt=0, run_seed=1)
              for t in SUITE.train[:count]]
    return [t for t in traces if not t.success]


def test_feedback_gives_the_instance_at_its_documented_shares_and_never_the_rule():
    failed = _failed_traces()
    kinds = Counter(feedback_kind(REGISTRY, t.metadata["family"], t.feedback) for t in failed)
    shares = [kinds[k] / len(failed) for k in (0, 1, 2)]
    assert shares == pytest.approx([0.25, 0.35, 0.40], abs=0.07)
    assert not any("LESSON[" in (t.feedback or "") or t.metadata["family"] + ")" in (t.feedback or "")
                   for t in failed)
    assert not any(REGISTRY.lookup(line) for t in failed for line in (t.feedback or "").splitlines())


WIDE = build_suite(32, seed=11, feedback="honest")
WIDE_REGISTRY = registry_for(11, 32)
CREDITED = sorted({text for text, statement in WIDE_REGISTRY.statements.items() if statement.kind != "hint"}
                  | {normalise_text(p) for phrasings in ACTION_PHRASINGS.values() for side in phrasings for p in side})
"""Every text scoring credits (normalised), and every action phrasing of either polarity: no feedback line may
contain one, so no filter or rearrangement of feedback strings can produce a credited text."""


def _never_creditable(line: str) -> None:
    for candidate in (line, mask_values(line)):
        flat = normalise_text(candidate)
        assert WIDE_REGISTRY.lookup(candidate) is None, line
        assert not [text for text in CREDITED if text in flat], line


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from(WIDE.train), st.integers(0, 5))
def test_feedback_never_contains_a_creditable_wording_of_any_rule(run_seed, task, attempt):
    """Property over seeds, tasks and attempts: a failed run's feedback lines (and the lines with their values
    masked) are no registry text and contain no rule wording and no action phrasing, of any family."""
    lines = [f"Wrong answer for {task.task_id}.",
             *honest_suite.feedback_lines(WIDE, task, False, run_seed=run_seed, attempt=attempt)]
    assert honest_suite.feedback_lines(WIDE, task, True, run_seed=run_seed, attempt=attempt) == []
    for line in lines:
        _never_creditable(line)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(sorted(TEMPLATES)), st.sampled_from(["expected", "check"]), st.randoms(use_true_random=False))
def test_every_instance_template_is_never_creditable_and_recognised_as_its_kind(action, kind, rng):
    line = instance_line(action, kind, rng)
    _never_creditable(line)
    assert instance_kind(action, line) == kind


def test_honest_reflector_rewords_errs_and_files_elsewhere_at_its_documented_rates():
    config = SimulatorConfig(reflection="honest")
    stated = Counter()
    sections = Counter()
    feedback_texts = set()
    for trace in _failed_traces():
        feedback_texts.update(normalise_text(line) for line in (trace.feedback or "").splitlines())
        for insight in honest_insights(trace_payload(trace), config):
            statement = REGISTRY.lookup(insight["content"])
            assert statement is not None
            if statement.kind == "rule":
                stated[statement.polarity] += 1
                sections[insight["section"] == SUITE.family(statement.subject).section] += 1
    wrong = stated[-1] / (stated[1] + stated[-1])
    assert 0.05 < wrong < 0.2  # 0.108 expected from the documented rates
    assert 0.1 < sections[False] / sum(sections.values()) < 0.3
    assert stated[1] + stated[-1] > 150


def test_verbatim_control_copies_feedback_lines():
    trace = _failed_traces()[0]
    copied = [i["content"] for i in verbatim_insights(trace_payload(trace))]
    assert copied == [line for line in trace.feedback.splitlines()]
    reply = simulate_reflection({"trace": trace_payload(trace)}, SimulatorConfig(reflection="verbatim"))
    assert [i["content"] for i in reply["insights"]] == copied


@pytest.mark.parametrize("mode", sorted(CONTROLS))
def test_each_copying_control_states_nothing_so_it_scores_the_empty_playbook(mode):
    """What the simulator says a copying control scores: its insights are no registry text, so a playbook holding
    every one of them over a pass of the train split is the empty playbook's accuracy (0.346)."""
    config = SimulatorConfig(reflection=mode)
    texts = []
    for trace in _failed_traces():
        insights = simulate_reflection({"trace": trace_payload(trace)}, config)["insights"]
        assert insights == CONTROLS[mode](trace_payload(trace))
        texts += [i["content"] for i in insights]
    assert texts and all(REGISTRY.lookup(text) is None for text in texts)
    assert honest_suite.expected_accuracy(SUITE, SUITE.held_out, _entries(texts)) == pytest.approx(
        honest_suite.expected_accuracy(SUITE, SUITE.held_out, []))


def test_copying_controls_filter_and_mask_as_documented():
    trace = {"task_id": "R05-000", "input": "Task 0 of family R05: a question about tax rates.",
             "feedback": "Wrong answer for R05-000.\nThe number of days from 2024-01-31 to 2024-03-10 was wrong.\n"
                         "Look again at tax rates."}
    assert [i["content"] for i in CONTROLS["copy-prefixes"](trace)] == [
        "The number of days from 2024-01-31 to 2024-03-10 was wrong."]
    assert [i["content"] for i in CONTROLS["copy-masked"](trace)] == [
        "The number of days from to was wrong.", "Look again at tax rates."]
    assert [i["content"] for i in CONTROLS["nouns"](trace)] == [
        "Mind: task, family, question, tax, rates, wrong, answer, number, days, look, again."]


def test_honest_aggregator_does_not_merge_two_wordings_of_one_rule():
    family = SUITE.families[3]
    one, two = REGISTRY.wordings[(family.family_id, 1)][:2]
    items = [{"item": n, "insights": [{"section": family.section, "content": text}], "entry_tags": []}
             for n, text in enumerate([one, two, one])]
    honest = simulate_aggregation({"items": items}, SimulatorConfig(reflection="honest"))
    adds = sorted((op["content"], op["support"]) for op in honest["operations"] if op["op"] == "ADD")
    assert adds == sorted([(one, 2), (two, 1)])


def test_honest_reflector_finds_the_family_from_the_task_id_when_metadata_is_cut():
    config = SimulatorConfig(reflection="honest")
    traces = [trace_payload(t) for t in _failed_traces(60)]
    stated = [t for t in traces
              if any(REGISTRY.lookup(i["content"]).kind == "rule" for i in honest_insights(t, config))]
    assert stated
    for trace in stated:
        assert honest_insights({**trace, "metadata": {}}, config) == honest_insights(trace, config)


def test_lesson_count_counts_junk_hints_and_opposites_as_entries_never_as_lessons():
    r00, r01 = SUITE.families[0].family_id, SUITE.families[1].family_id
    texts = [REGISTRY.wordings[(r00, 1)][0], REGISTRY.wordings[(r00, 1)][9], REGISTRY.wordings[(r00, -1)][0],
             REGISTRY.wordings[(r01, -1)][3], REGISTRY.hints[r01][0], "Wrong answer for R01-003.",
             REGISTRY.generics[0][1][2]]
    count = honest_suite.count_lessons(SUITE, _entries(texts))
    assert (count.entries, count.lessons, count.families_right, count.families_wrong, count.families_both,
            count.unknown) == (7, 2, 1, 2, 1, 2)
    assert count.entries_per_lesson == 3.5


# ---------------------------------------------------------------------------------------------- item 7's options


def test_noisy_citations_leave_out_and_add_entries_at_their_documented_rates():
    noisy = build_suite(seed=7, feedback="honest", honest=HonestFeedback(noisy_citations=True))
    entries = _entries([REGISTRY.wordings[(f.family_id, 1)][0] for f in SUITE.families] + [REGISTRY.generics[0][1][0]])
    used = cited = spurious = 0
    for n, task in enumerate(SUITE.train):
        exact = honest_suite.used_entries(noisy, task, entries).split(",")
        got = [e for e in honest_suite.cited_entries(noisy, task, entries, run_seed=3, attempt=0, version=n).split(",")
               if e]
        assert honest_suite.cited_entries(SUITE, task, entries, run_seed=3, attempt=0, version=n) == ",".join(exact)
        used += len(exact)
        cited += len(set(got) & set(exact))
        spurious += len(set(got) - set(exact))
    assert 1 - cited / used == pytest.approx(0.2, abs=0.05)
    assert spurious / len(SUITE.train) == pytest.approx(0.1, abs=0.04)


def test_a_wrong_grader_swaps_the_expected_values_and_the_reflector_learns_the_opposite_rule():
    misled = build_suite(seed=7, feedback="honest", honest=HonestFeedback(misleading_families=("R02", "R03")))
    config = SimulatorConfig(reflection="honest")
    polarities = Counter()
    for attempt in (0, 1):
        for task in [t for t in misled.train if t.family_id in ("R02", "R03")]:
            trace = run_task(misled, task, [], playbook_id="pb", playbook_version=0, agent_id="a", attempt=attempt,
                             run_seed=2)
            if trace.success:
                continue
            assert (trace.metadata.get("grader") == "misleading") == (attempt == 0)
            lines = trace.feedback.splitlines()
            if attempt == 0:
                assert len(lines) == 2 and instance_kind(REGISTRY.actions[task.family_id], lines[1]) == "expected"
                for line in lines:
                    _never_creditable(line)
                for insight in honest_insights(trace_payload(trace), config):
                    statement = REGISTRY.lookup(insight["content"])
                    if statement is not None and statement.kind == "rule":
                        polarities[statement.polarity] += 1
    assert polarities[-1] > 10 * polarities[1] and polarities[-1] >= 20


def test_an_agent_holding_both_rules_cites_the_side_it_followed_and_succeeds_as_with_that_side():
    cited = build_suite(seed=7, feedback="honest", honest=HonestFeedback(cite_followed=True))
    both = _entries([text for f in SUITE.families for text in (REGISTRY.wordings[(f.family_id, 1)][0],
                                                               REGISTRY.wordings[(f.family_id, -1)][0])])
    hold = honest_suite.holdings(cited, both)
    outcomes: dict[bool, list[bool]] = {True: [], False: []}
    for n, task in enumerate(SUITE.train):
        trace = run_task(cited, task, both, playbook_id="pb", playbook_version=n, agent_id="a", attempt=0, run_seed=1)
        used = set(str(trace.metadata["used_entries"]).split(","))
        family = hold[task.family_id]
        assert used in ({*family.right}, {*family.wrong})
        outcomes[used == {*family.right}].append(bool(trace.success))
        # without the option the agent cites both sides
        plain = run_task(SUITE, task, both, playbook_id="pb", playbook_version=n, agent_id="a", attempt=0, run_seed=1)
        assert set(str(plain.metadata["used_entries"]).split(",")) == {*family.right, *family.wrong}
    assert len(outcomes[True]) / len(SUITE.train) == pytest.approx(0.5, abs=0.06)
    assert sum(outcomes[True]) / len(outcomes[True]) == pytest.approx(0.95, abs=0.04)
    assert sum(outcomes[False]) / len(outcomes[False]) == pytest.approx(0.05, abs=0.04)
    # scoring's expected accuracy is unchanged: the mean of the two sides is BOTH_P
    assert expected_accuracy(cited, cited.held_out, both) == expected_accuracy(SUITE, SUITE.held_out, both)
