"""The suite's harmful rules: a playbook holding one does worse than none; only misleading traces teach it."""

from combee_core.llm.simulator import extract_lessons
from combee_core.models import PlaybookEntry
from combee_core.sim.task_suite import build_suite, expected_accuracy, misleading_trace, run_task, train_traces


def _entry(n: int, section: str, content: str) -> PlaybookEntry:
    return PlaybookEntry(entry_id=f"e{n}", section=section, content=content, created_version=1, updated_version=1)


def test_a_harmful_rule_lowers_held_out_accuracy_below_the_empty_playbook_even_next_to_the_insight():
    suite = build_suite(seed=7)
    family = suite.families[3]
    good = [_entry(1, family.section, family.insight)]
    bad = good + [_entry(2, family.section, family.harmful_insight)]
    tasks = [t for t in suite.held_out if t.family_id == family.family_id]
    assert expected_accuracy(suite, tasks, good) == suite.with_insight_p
    assert expected_accuracy(suite, tasks, bad) == suite.harmful_p < family.base_p
    assert expected_accuracy(suite, tasks, []) == family.base_p
    assert expected_accuracy(suite, suite.held_out, bad) < expected_accuracy(suite, suite.held_out, good)


def test_only_misleading_traces_state_the_harmful_rule():
    suite = build_suite(seed=7)
    harmful = {f.harmful_insight for f in suite.families}
    ordinary = {lesson.text for t in train_traces(suite, 480) for lesson in extract_lessons(t.feedback)}
    assert not ordinary & harmful
    task = suite.train[0]
    misled = misleading_trace(suite, task, playbook_id="pb", playbook_version=0, agent_id="a", attempt=0)
    lessons = [lesson.text for lesson in extract_lessons(misled.feedback)]
    assert lessons == [suite.family(task.family_id).harmful_insight]
    assert misled.success is False and misled.trace_id != run_task(
        suite, task, [], playbook_id="pb", playbook_version=0, agent_id="a", attempt=0, run_seed=0).trace_id
