"""``combee_core.method``: a round gives the version the production processors give when chained the way the stages
chain them (each processor's published records fed to the next one's input), at the production defaults."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from combee_core.aggregate.processor import Aggregator, AggregatorConfig
from combee_core.batch.processor import Batcher, BatcherConfig
from combee_core.batch.shuffle import aggregation_shape
from combee_core.control.processor import Controller
from combee_core.llm.config import LLMConfig
from combee_core.llm.roles import LLMRoles
from combee_core.llm.simulator import SimulatorConfig
from combee_core.method import Method
from combee_core.models import (
    BatchManifest,
    BatchMetrics,
    PartialUpdate,
    PlaybookVersion,
    Reflection,
    ShuffledReflection,
    Trace,
)
from combee_core.playbook import Playbook, render_playbook
from combee_core.processors.testing import EffectLog
from combee_core.reduce.processor import Reducer, ReducerConfig
from combee_core.reduce.reducer_state import ReducerLogs
from combee_core.reduce.reduction import ReduceOutcome
from combee_core.reflect.processor import reflect_all
from combee_core.settings import CombeeSettings
from combee_core.sim.suite import TaskSuite
from combee_core.sim.task_suite import build_suite, run_task
from combee_core.topology import Topic

NOW = datetime(2026, 1, 1, tzinfo=UTC)
ROUND = 12


def _roles() -> LLMRoles:
    return LLMRoles(LLMConfig(simulator=SimulatorConfig(seed=0, mode="virtual", paraphrases=3)))


def _settings(**overrides: object) -> CombeeSettings:
    # a sync fleet (batches close at size, no chain pacing); lexical curation keeps the test in milliseconds
    return CombeeSettings.load(env={}, fleet_mode="sync", batch_size=ROUND, embedding_model="none", **overrides)


def _traces(suite: TaskSuite, playbook: Playbook, start: int) -> list[Trace]:
    return [run_task(suite, suite.train[i], playbook.entries, playbook_id="pb", playbook_version=playbook.version,
                     agent_id=f"agent{i % 4}", attempt=0, run_seed=0) for i in range(start, start + ROUND)]


async def _used(trace: Trace) -> str | None:
    return str(trace.metadata.get("used_entries") or "") or None


class StagesInMemory:
    """The processors chained as the stages chain them: the reflector's published reflections go to the batcher,
    the batcher's published copies to the aggregator, its partials to the reducer (which reads the batch's manifest
    and its own versions as its logs), the reducer's metrics to the controller."""

    def __init__(self, settings: CombeeSettings) -> None:
        self.settings, self.roles, self.log = settings, _roles(), EffectLog()
        self.batcher = Batcher(BatcherConfig.from_settings(settings))
        self.aggregator = Aggregator(AggregatorConfig(model=settings.aggregator_model))
        self.reducer = Reducer(ReducerConfig.from_settings(settings), self._reduce)
        self.logs = ReducerLogs()
        self.controller = Controller(settings)
        self.before: Playbook | None = None

    async def _reduce(self, children, context):  # type: ignore[no-untyped-def]
        result = await self.roles.reduce(children, context)
        return ReduceOutcome(operations=result.operations, usage=result.usage, latency_s=result.latency_s)

    async def round(self, traces: list[Trace]) -> PlaybookVersion:
        for _, effects in await reflect_all([(t, t.trace_id) for t in traces], self.roles.reflect, _used):
            self.log.extend(effects)
        reflections = [r for r in self.log.published(Topic.REFLECTIONS)[-len(traces):] if isinstance(r, Reflection)]
        batch = [e for r in reflections for e in self.batcher.take(r, r.trace_id, 0.0, NOW)]
        self.log.extend(batch)
        [manifest] = [m for m in EffectLog(batch).published(Topic.BATCHES) if isinstance(m, BatchManifest)]
        self.logs.take_manifest(manifest)
        playbook = self.logs.playbook("pb")

        async def context(playbook_id: str, version: int) -> str:  # the version the copies name (context lag)
            [named] = [p for p in (playbook, self.before) if p is not None and p.version == version]
            return render_playbook(named, self.settings.llm_context_tokens).text

        windows = []
        for copy in EffectLog(batch).published(Topic.SHUFFLE):
            assert isinstance(copy, ShuffledReflection)
            effects, ready = self.aggregator.take(copy, copy, 0.0)
            self.log.extend(effects)
            windows += [ready] if ready is not None else []
        answered = await asyncio.gather(*(self.aggregator.aggregate(w, self.roles.aggregate, context)
                                          for w in windows))
        partials = [p for effects in answered for p in EffectLog(effects).published(Topic.PARTIALS)]
        for partial in partials:
            assert isinstance(partial, PartialUpdate)
            assert self.reducer.take(partial, partial, playbook.version) is None
        ready_partials = self.reducer.ready("pb", playbook.version)
        assert ready_partials is not None
        previous = self.logs.published_at.get("pb") if playbook.version else None
        effects = self.log.extend(await self.reducer.next_version(playbook, ready_partials, parent_version=None,
                                                                  manifest=manifest, previous_at=previous, now=NOW))
        [version] = EffectLog(effects).published(Topic.PLAYBOOK)
        [metrics] = EffectLog(effects).published(Topic.METRICS)
        assert isinstance(version, PlaybookVersion) and isinstance(metrics, BatchMetrics)
        self.before = playbook
        self.logs.take_version(version)
        self.log.extend(self.controller.take(metrics, metrics, NOW))
        return version


def test_a_round_gives_the_version_the_processors_chained_as_the_stages_give():
    suite, settings = build_suite(seed=7), _settings()

    async def both() -> tuple[list[PlaybookVersion], list[PlaybookVersion]]:
        method, stages = Method(_roles(), settings, used_entries=_used), StagesInMemory(settings)
        by_method, by_stages = [], []
        for start in range(0, 3 * ROUND, ROUND):
            done = await method.round("pb", _traces(suite, method.playbook("pb"), start), now=NOW)
            assert done.version is not None and done.dead_letters == []
            by_method.append(done.version)
            by_stages.append(await stages.round(_traces(suite, stages.logs.playbook("pb"), start)))
        return by_method, by_stages

    by_method, by_stages = asyncio.run(both())
    assert [v.version for v in by_method] == [1, 2, 3]
    assert by_method[-1].entries  # the rounds learned something, so the comparison compares playbooks
    assert [v.model_dump(mode="json") for v in by_method] == [v.model_dump(mode="json") for v in by_stages]


def test_a_round_runs_the_production_defaults_unless_its_settings_say_otherwise():
    """Fan-in 6 and p = 2: a batch of 100 is dealt into the fewest subgroups whose copies fit a call (k = 34, not
    the paper's floor(sqrt(100)) = 10, whose 20 copies a call of 6 cannot read); fan-in 32 fits k = 10."""
    default = Method(_roles(), CombeeSettings.load(env={}, embedding_model="none"))
    assert (default.shuffle_config.p, default.shuffle_config.max_fan_in) == (2, 6)
    assert default.reducer.config.max_fan_in == 6
    reflections = [Reflection(reflection_id=f"r{i}", trace_id=f"t{i}", playbook_id="pb", seen_version=0,
                              insights=[], model="sim") for i in range(100)]
    assert default.shuffle("pb", reflections, now=NOW).manifest.k == aggregation_shape(100, 2, 6).k == 34
    wide = Method(_roles(), _settings(max_fan_in=32))
    assert wide.shuffle("pb", reflections, now=NOW).manifest.k == 10


def test_a_round_whose_traces_all_fail_to_reflect_builds_nothing_and_says_why():
    class Down:
        async def reflect(self, trace, playbook_text=None):  # type: ignore[no-untyped-def]
            from combee_core.llm.errors import LLMCallError
            raise LLMCallError("reflector", "m", "the model is down")

        aggregate = reduce = reflect

    suite = build_suite(seed=7)
    done = asyncio.run(Method(Down(), _settings()).round("pb", _traces(suite, Playbook.empty("pb"), 0), now=NOW))
    assert done.version is None and len(done.dead_letters) == ROUND
    assert "reflection failed" in done.dead_letters[0].reason
