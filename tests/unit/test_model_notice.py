"""What a worker says about its models (``combee_core.model_notice``, ``combee worker``'s start lines)."""

from __future__ import annotations

from combee_core.model_notice import EmptyVersionNotice, describe_models, simulated_roles, simulator_warning
from combee_core.settings import CombeeSettings
from streams.cli.worker import describe_counters, start_lines


def test_the_default_models_are_named_and_the_simulator_warning_says_what_it_learns_from_and_where_to_look():
    settings = CombeeSettings.load(env={})
    assert simulated_roles(settings) == ["reflector", "aggregator", "reducer"]
    assert describe_models(settings).startswith("models: reflector combee-sim/default (offline simulator)")
    warning = simulator_warning(settings)
    assert warning is not None and "LESSON[section]: text" in warning and "docs/models.md" in warning


def test_no_simulator_warning_when_every_role_calls_a_model():
    settings = CombeeSettings.load(env={}, reflector_model="openai/gpt-4o-mini", aggregator_model="openai/gpt-4o-mini",
                                   reducer_model="openai/gpt-4o-mini")
    assert simulator_warning(settings) is None and "offline simulator" not in describe_models(settings)
    # an aggregator left on the simulator is still said, but not as "learns only from LESSON lines"
    partly = settings.model_copy(update={"aggregator_model": "combee-sim/default"})
    warning = simulator_warning(partly)
    assert warning is not None and warning.startswith("WARNING: aggregator runs") and "LESSON" not in warning


def test_empty_versions_are_said_once_per_playbook_then_at_most_once_per_interval_with_a_count():
    notice = EmptyVersionNotice("combee-sim/default", interval_s=600)
    first = notice.observe("support-bot", 1, operations=0, traces=40, now=0.0)
    assert first is not None and "support-bot v1: no operations from 40 traces" in first
    assert notice.observe("support-bot", 2, operations=0, traces=40, now=10.0) is None
    assert notice.observe("other", 1, operations=0, traces=5, now=11.0) is not None  # per playbook
    assert notice.observe("support-bot", 3, operations=2, traces=40, now=12.0) is None  # learned something
    again = notice.observe("support-bot", 4, operations=0, traces=40, now=700.0)
    assert again is not None and "(2 such versions since the last notice)" in again
    assert EmptyVersionNotice("openai/gpt-4o").observe("pb", 1, operations=0, traces=3, now=0.0) is None


def test_worker_start_lines_leave_out_promotion_stages_without_promotion_and_name_the_evaluators_scope():
    off = start_lines(CombeeSettings.load(env={}), ("reflect", "batch", "promote", "evaluate"), "b:9092")
    assert off[0] == "worker: stages reflect, batch on b:9092, topics combee.* (not promote, evaluate: they run " \
                     "only with --promotion)"
    assert any("WARNING: reflector, aggregator, reducer run on the offline simulator" in line for line in off)
    on = start_lines(CombeeSettings.load(env={}, promotion=True), ("promote", "evaluate"), "b:9092")
    assert on[0] == "worker: stages promote, evaluate on b:9092, topics combee.*"
    assert not any("WARNING" in line for line in on)  # no LLM stage runs here
    assert any("built-in evaluator scores playbook(s) demo" in line for line in on)
    assert describe_counters({"b": 2, "a": 1}) == "a 1, b 2" and describe_counters({}) == "nothing counted"
