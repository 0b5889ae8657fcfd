"""A learning benchmark that copying cannot pass (issue 26 item 5): the simulator's honest mode, scored by what entries
state (the registry), never by the similarity curation uses.

    python -m bench.honest_learning      # 3 seeds x C = 6, 12, 24; writes bench/results/honest_learning.json
    python -m bench.honest_learning --seeds 0 --capacities 12
    python -m bench.honest_learning --variants sequential --batch-sizes 100,160,240,320   # the quality bound, §12e

Each run is the sync fleet of ``bench/learning.py`` (the ``combee_core`` functions the stages call, no Kafka, the
simulator in virtual time), 960 traces, context on, with the curation as it is on the tree that runs it
(reduced and applied by the reducer stage's processor configured from the default settings, as the stage does, with
a 1,000-token budget). Variants:

- sequential: batch 3, p = 1, one aggregator call per batch;
- combee: batch 100, p = 2, the default configuration: k = floor(sqrt(n)) subgroups, raised until no aggregator call
  reads more than the default ``COMBEE_MAX_FAN_IN`` copies (``combee_core.batch.shuffle.aggregation_shape``);
- combee fan-in=C: the same with ``COMBEE_MAX_FAN_IN`` = C, so k rises until no aggregator call reads more than C
  copies (and the reducer's scan reads at most C partials per call): the setting sized to the model's capacity;
- four copying controls (must fail: each at least ``CONTROL_MARGIN`` below combee at every capacity): combee with
  a reflector that copies every feedback line verbatim, that copies them minus five fixed line prefixes, that copies
  them with their values masked, or that echoes the feedback's nouns (``combee_core.llm.copy_controls``);
- oracle consolidation (not a method): combee, with each ADD of the partials reworded by the benchmark to one
  canonical wording of what the registry says it states: what perfect paraphrase consolidation alone would reach;
- judge alone: combee with no reducer call (``bench.reducer_standins.JUDGE_ALONE``); not the combee row, whose
  contested lessons go to the simulated reducer model (it merges identical texts, loses some by capacity);
- reducer stand-in: X (union, merge-all, drop-all, oracle, adversarial): combee asking a scripted stand-in
  (``bench.reducer_standins``) what the judge is unsure of; at most ``STANDIN_TOLERANCE`` below the judge alone;
- sequential / combee noisy citations: agents cite what they used with errors; ... wrong lessons: the same plus a
  wrong grader on four families for the first pass (issue 38 item 7: how long wrong rules are served, simulator.md);
- sequential / combee cited, and wrong lessons cited: the same two environments, and an agent holding a rule and its
  opposite cites the side it followed (docs/simulator.md, "An agent holding both rules cites the one it followed");
- combee bs N (``--batch-sizes``): combee at batch N instead of 100, the rest as combee (the quality bound on
  ``controller_bs_max``, docs/benchmarks-history.md §12e).
- X pipelined: X with ``COMBEE_CONTEXT_LAG`` = 1, every batch's aggregators reading the version before the one it
  applies to (the production default since issue 44's context lag); every other variant runs with lag 0, the
  aggregators reading the version the batch applies to, as all the figures before it were measured.

A row passes when its mean held-out accuracy is within 1 point of sequential's at the same capacity, its entries
per distinct lesson is <= 1.2, and every version of every seed is within the budget. A control row *fails as it
must* when its accuracy is at least ``CONTROL_MARGIN`` below combee's at the same capacity (fixed in
docs/simulator.md before the first run). Every figure is simulated (``docs/simulator.md``, "Honest mode").
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from bench.common import machine, write_results
from bench.learning import fleet
from bench.reducer_standins import JUDGE_ALONE, STANDINS, standin_reducer
from combee_core.llm.copy_controls import CONTROLS as COPY_CONTROLS
from combee_core.llm.honest import feedback_kind
from combee_core.llm.reflector_role import trace_payload
from combee_core.llm.simulator import SimulatorConfig
from combee_core.models import AddOp, Operation, PlaybookEntry
from combee_core.playbook import playbook_tokens
from combee_core.settings import CombeeSettings
from combee_core.sim import honest_suite
from combee_core.sim.suite import HonestFeedback, TaskSuite
from combee_core.sim.task_suite import build_suite, run_task

RESULTS = Path(__file__).parent / "results" / "honest_learning.json"
STANDIN_PREFIX = "reducer stand-in: "
NOISY = HonestFeedback(noisy_citations=True)
MISLED = HonestFeedback(noisy_citations=True, misleading_families=("R00", "R01", "R02", "R03"), misleading_passes=1)
"""Issue 38 item 7's baseline: agents that cite wrongly; and a wrong grader on four families for the first pass."""
CITED = HonestFeedback(noisy_citations=True, cite_followed=True)
MISLED_CITED = HonestFeedback(noisy_citations=True, cite_followed=True, misleading_families=MISLED.misleading_families,
                              misleading_passes=1)
"""Issue 38 items 1 and 7: as NOISY / MISLED, and an agent holding both rules cites the one it followed."""


@dataclass(frozen=True)
class Spec:
    batch: int
    p: int
    subgroups: Literal["sqrt", "single"]
    reflection: Literal["honest", "verbatim", "copy-prefixes", "copy-masked", "nouns"]
    fan_in_at_capacity: bool = False
    """``COMBEE_MAX_FAN_IN`` set to the simulated capacity C (no call reads more items than the model keeps), for
    the aggregators' subgroups and the reducer's scan; otherwise the default setting (``DEFAULT_CALL_CAPACITY``)."""
    environment: HonestFeedback = HonestFeedback()
    """The honest suite's environment: noisy citations, a wrong grader (docs/simulator.md)."""
    reducer: str | None = None
    """A scripted stand-in for the reducer model (``bench.reducer_standins``), asked what the judge is unsure of."""


VARIANTS = {
    "sequential": Spec(batch=3, p=1, subgroups="single", reflection="honest"),
    "combee": Spec(batch=100, p=2, subgroups="sqrt", reflection="honest"),
    "combee fan-in=C": Spec(batch=100, p=2, subgroups="sqrt", reflection="honest", fan_in_at_capacity=True),
    "copy verbatim (control)": Spec(batch=100, p=2, subgroups="sqrt", reflection="verbatim"),
    "copy minus 5 prefixes (control)": Spec(batch=100, p=2, subgroups="sqrt", reflection="copy-prefixes"),
    "copy values masked (control)": Spec(batch=100, p=2, subgroups="sqrt", reflection="copy-masked"),
    "echo nouns (control)": Spec(batch=100, p=2, subgroups="sqrt", reflection="nouns"),
    "oracle consolidation": Spec(batch=100, p=2, subgroups="sqrt", reflection="honest"),
    "sequential noisy citations": Spec(batch=3, p=1, subgroups="single", reflection="honest", environment=NOISY),
    "combee noisy citations": Spec(batch=100, p=2, subgroups="sqrt", reflection="honest", environment=NOISY),
    "sequential wrong lessons": Spec(batch=3, p=1, subgroups="single", reflection="honest", environment=MISLED),
    "combee wrong lessons": Spec(batch=100, p=2, subgroups="sqrt", reflection="honest", environment=MISLED),
    "sequential cited": Spec(batch=3, p=1, subgroups="single", reflection="honest", environment=CITED),
    "combee cited": Spec(batch=100, p=2, subgroups="sqrt", reflection="honest", environment=CITED),
    "sequential wrong lessons cited": Spec(batch=3, p=1, subgroups="single", reflection="honest",
                                           environment=MISLED_CITED),
    "combee wrong lessons cited": Spec(batch=100, p=2, subgroups="sqrt", reflection="honest", environment=MISLED_CITED),
    JUDGE_ALONE: Spec(batch=100, p=2, subgroups="sqrt", reflection="honest", reducer=JUDGE_ALONE),
    **{f"{STANDIN_PREFIX}{name}": Spec(batch=100, p=2, subgroups="sqrt", reflection="honest", reducer=name)
       for name in STANDINS},
}
CONTROLS = tuple(name for name, spec in VARIANTS.items() if spec.reflection not in ("honest",))
STANDIN_TOLERANCE = 0.01  # how far below the judge-alone row (else combee's) a stand-in's accuracy may be
CONTROL_MODES = tuple(VARIANTS[name].reflection for name in CONTROLS)
CONTROL_MARGIN = 0.10
"""Each control's mean held-out accuracy must be at least this far below combee's (docs/simulator.md, fixed
before the first run)."""
ORACLE = "oracle consolidation"
BATCH_PREFIX = "combee bs "


PIPELINED = " pipelined"


def variant_spec(variant: str) -> Spec:
    """A named variant, or ``combee bs N``: combee (default configuration) at batch N."""
    variant = variant.removesuffix(PIPELINED)  # X pipelined: X with context lag 1 (one())
    if variant.startswith(BATCH_PREFIX):
        return Spec(batch=int(variant.removeprefix(BATCH_PREFIX)), p=2, subgroups="sqrt", reflection="honest")
    return VARIANTS[variant]


def oracle_rewrite(suite: TaskSuite) -> Callable[[list[Operation]], list[Operation]]:
    """Not a method (it reads the registry): each ADD of the partials reworded to one canonical wording (and
    section) of what it states, so the curation sees identical texts: what perfect paraphrase consolidation alone
    would reach."""
    registry = honest_suite.suite_registry(suite)
    generic = {f"generic:{n}": (section, texts[0]) for n, (section, texts) in enumerate(registry.generics)}

    def rewrite(operations: list[Operation]) -> list[Operation]:
        out: list[Operation] = []
        for op in operations:
            statement = registry.lookup(op.content) if isinstance(op, AddOp) else None
            if statement is not None and statement.kind != "hint":
                family = statement.subject
                section, canonical = (generic[family] if statement.kind == "generic" else (
                    registry.sections[family], registry.wordings[(family, statement.polarity)][0]))
                op = op.model_copy(update={"section": section, "content": canonical})
            out.append(op)
        return out

    return rewrite


def wrong_rules_served(suite: TaskSuite, run: Any) -> dict[str, float]:
    """How long wrong rules were served (the registry reads each version after the run; curation never does):
    traces whose playbook held an opposite rule of their own family (agents misled), distinct opposite-rule entries
    ever served, and the traces (fleet time) each was served for, on average."""
    registry = honest_suite.suite_registry(suite)
    wrong_by_version: dict[int, dict[str, str]] = {0: {}}
    for version in run.versions:
        wrong_by_version[version.version] = {
            e.entry_id: s.subject for e in version.entries
            if (s := registry.lookup(e.content)) is not None and s.kind == "rule" and s.polarity < 0}
    per_version = Counter(t.playbook_version for t in run.traces)
    misled = sum(1 for t in run.traces
                 if str(t.metadata["family"]) in wrong_by_version.get(t.playbook_version, {}).values())
    served: Counter[str] = Counter()
    for version, wrong in wrong_by_version.items():
        for entry_id in wrong:
            served[entry_id] += per_version.get(version, 0)
    served = Counter({e: n for e, n in served.items() if n})
    return {"misled_traces": misled, "misled_share": misled / max(1, len(run.traces)),
            "wrong_entries_served": len(served),
            "wrong_entry_traces_served": statistics.mean(served.values()) if served else 0.0}


def realised_rates(suite: TaskSuite, run: Any) -> dict[str, float]:
    """What the feedback and the reflector actually did in a run: shares of failed runs whose feedback gave the
    instance's expected and given answer / the failed check / the outcome only, the share of rule lessons stated
    that were the opposite rule, and how many feedback lines the registry credits (0 by construction)."""
    registry = honest_suite.suite_registry(suite)
    failed = [t for t in run.traces if t.success is False]
    kinds = Counter(feedback_kind(registry, str(t.metadata["family"]), t.feedback or "") for t in failed)
    polarities = Counter(s.polarity for r in run.reflections for i in r.insights
                         if (s := registry.lookup(i.content)) is not None and s.kind == "rule")
    stated = polarities[1] + polarities[-1]
    credited = sum(1 for t in run.traces for line in (t.feedback or "").splitlines() if registry.lookup(line))
    return {"failed": len(failed), "feedback_expected": kinds[0] / max(1, len(failed)),
            "feedback_check": kinds[1] / max(1, len(failed)), "feedback_outcome": kinds[2] / max(1, len(failed)),
            "wrong_lesson_rate": polarities[-1] / max(1, stated), "rule_lessons": stated,
            "feedback_lines_credited": credited}


async def one(variant: str, capacity: int, seed: int, *, traces: int, budget: int) -> dict[str, Any]:
    spec, lag = variant_spec(variant), 1 if variant.endswith(PIPELINED) else 0
    suite = build_suite(seed=7, feedback="honest", honest=spec.environment)
    sim = SimulatorConfig(seed=seed, capacity=capacity, mode="virtual", reflection=spec.reflection,
                          suite_seed=suite.seed, suite_families=len(suite.families))
    fan_in = capacity if spec.fan_in_at_capacity else CombeeSettings.load(env={}).max_fan_in
    settings = CombeeSettings.load(env={}, playbook_budget_tokens=budget, max_fan_in=fan_in, p=spec.p, context_lag=lag,
                                   subgroups=spec.subgroups, run_seed=seed, llm_context=True)
    run = await fleet(suite, sim, settings, batch=spec.batch, traces=traces, seed=seed,
                      rewrite=oracle_rewrite(suite) if variant == ORACLE else None,
                      make_reducer=None if spec.reducer is None else (  # None: as the reducer stage builds it
                          standin_reducer(honest_suite.suite_registry(suite), settings, spec.reducer)))
    count = honest_suite.count_lessons(suite, run.playbook.entries)
    version_tokens = [v.stats.playbook_tokens for v in run.versions]
    return {
        "variant": variant, "capacity": capacity, "seed": seed, "versions": len(run.versions),
        "held_out_accuracy": round(honest_suite.expected_accuracy(suite, suite.held_out, run.playbook.entries), 4),
        "entries": count.entries, "lessons": count.lessons, "entries_per_lesson": round(count.entries_per_lesson, 3),
        "families_right": count.families_right, "families_wrong": count.families_wrong,
        "families_both": count.families_both, "unknown": count.unknown,
        "tokens_final": playbook_tokens(run.playbook), "tokens_max": max(version_tokens),
        "within_budget": all(t <= budget for t in version_tokens),
        "versions_over_budget": sum(1 for t in version_tokens if t > budget),
        "evictions": sum(1 for v in run.versions for a in v.operations if a.reason.startswith("evicted")),
        **surplus(suite, run.playbook.entries), "fan_in": fan_in,
        "aggregator_calls_per_version": statistics.mean(v.stats.k for v in run.versions),
        "calls_per_version": statistics.mean(v.stats.llm_calls for v in run.versions),
        **realised_rates(suite, run), **wrong_rules_served(suite, run),
    }


SERVED = ("misled_share", "wrong_entries_served", "wrong_entry_traces_served")
SURPLUS = ("extra_wordings", "opposite_entries", "no_lesson_entries")


def surplus(suite: TaskSuite, entries: Sequence[PlaybookEntry]) -> dict[str, int]:
    """Where the entries beyond one per lesson held come from (the registry reads the final playbook; curation never
    does): more wordings of a lesson already held (consolidation missed them), opposite rules (contradiction
    handling kept them), entries stating no lesson (hints, outcome lines)."""
    registry = honest_suite.suite_registry(suite)
    stated: Counter[tuple[str, str]] = Counter()
    opposite = no_lesson = 0
    for entry in entries:
        statement = registry.lookup(entry.content)
        if statement is None or statement.kind == "hint":
            no_lesson += 1
        elif statement.kind == "rule" and statement.polarity < 0:
            opposite += 1
        else:
            stated[(statement.kind, statement.subject)] += 1
    return {"extra_wordings": sum(n - 1 for n in stated.values()), "opposite_entries": opposite,
            "no_lesson_entries": no_lesson}


def static_checks(suite: TaskSuite) -> list[dict[str, Any]]:
    """What the scoring credits, on hand-made playbooks (no run): the rules verbatim, without their tag, reworded,
    in another section, the opposite rules, both, and the feedback's outcome lines."""
    registry = honest_suite.suite_registry(suite)

    def score(name: str, texts: list[tuple[str, str]]) -> dict[str, Any]:
        entries = [PlaybookEntry(entry_id=f"e{n}", section=s, content=c, created_version=1, updated_version=1)
                   for n, (s, c) in enumerate(texts)]
        default = build_suite(seed=suite.seed)
        return {"playbook": name, "honest": round(honest_suite.expected_accuracy(suite, suite.held_out, entries), 3),
                "default_mode": round(_default_accuracy(default, entries), 3)}

    fams = suite.families
    return [
        score("empty", []),
        score("24 rules verbatim, tagged", [(f.section, f.insight) for f in fams]),
        score("24 rules, tag removed", [(f.section, f.insight.replace(f" ({f.family_id})", "")) for f in fams]),
        score("24 rules, a rewording each (last of 60), section 'general'",
              [("general", registry.wordings[(f.family_id, 1)][-1]) for f in fams]),
        score("24 opposite rules", [(f.section, registry.wordings[(f.family_id, -1)][0]) for f in fams]),
        score("24 rules and their opposites", [(f.section, registry.wordings[(f.family_id, s)][7])
                                              for f in fams for s in (1, -1)]),
        score("24 hints", [(f.section, registry.hints[f.family_id][0]) for f in fams]),
        *(score(f"every insight of the {mode} control over one pass of the train split",
                control_texts(suite, mode)) for mode in CONTROL_MODES),
    ]


def control_texts(suite: TaskSuite, mode: str) -> list[tuple[str, str]]:
    """(section, content) of every insight a copying control writes for one pass over the train split with the
    empty playbook (run seed 0): what a curation that kept all of them would hold."""
    traces = [run_task(suite, task, [], playbook_id="pb", playbook_version=0, agent_id="a", attempt=0, run_seed=0)
              for task in suite.train]
    return list(dict.fromkeys((i["section"], i["content"]) for t in traces
                              for i in COPY_CONTROLS[mode](trace_payload(t))))


def _default_accuracy(suite: TaskSuite, entries: list[PlaybookEntry]) -> float:
    from combee_core.sim.task_suite import expected_accuracy

    return expected_accuracy(suite, suite.held_out, entries)


def summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean (and population spread of accuracy) over seeds per (capacity, variant), with the pass verdict."""
    out = []
    for capacity in sorted({r["capacity"] for r in rows}):
        seq = [r["held_out_accuracy"] for r in rows if r["capacity"] == capacity and r["variant"] == "sequential"]
        for variant in dict.fromkeys([*VARIANTS, *(r["variant"] for r in rows)]):
            group = [r for r in rows if r["capacity"] == capacity and r["variant"] == variant]
            if not group:
                continue
            mean = lambda key: statistics.mean(r[key] for r in group)  # noqa: B023,E731
            acc = mean("held_out_accuracy")
            row = {"capacity": capacity, "variant": variant, "seeds": len(group), "acc": round(acc, 3),
                   "acc_sd": round(statistics.pstdev(r["held_out_accuracy"] for r in group), 3),
                   "vs_sequential": round(acc - statistics.mean(seq), 3) if seq else None,
                   "entries": round(mean("entries"), 1), "lessons": round(mean("lessons"), 1),
                   "entries_per_lesson": round(mean("entries_per_lesson"), 2),
                   "families_right": round(mean("families_right"), 1),
                   "families_wrong": round(mean("families_wrong"), 1), "families_both": round(mean("families_both"), 1),
                   "unknown": round(mean("unknown"), 1),
                   "tokens_max": max(r["tokens_max"] for r in group),
                   "within_budget": all(r["within_budget"] for r in group),
                   "versions_checked": sum(r["versions"] for r in group),
                   "versions_over_budget": sum(r["versions_over_budget"] for r in group),
                   "evictions": round(mean("evictions"), 1), "fan_in": group[0]["fan_in"],
                   **{key: round(mean(key), 1) for key in SURPLUS if key in group[0]},
                   "aggregator_calls": round(mean("aggregator_calls_per_version"), 1),
                   "calls_per_version": round(mean("calls_per_version"), 1),
                   "wrong_lesson_rate": round(mean("wrong_lesson_rate"), 3),
                   **{key: round(mean(key), 3) for key in SERVED if key in group[0]}}
            row["passes"] = bool(seq and acc >= statistics.mean(seq) - 0.01 and row["entries_per_lesson"] <= 1.2
                                 and row["within_budget"])
            out.append(row)
        combee = [r for r in out if r["capacity"] == capacity and r["variant"] == "combee"]
        alone = [r for r in out if r["capacity"] == capacity and r["variant"] == JUDGE_ALONE] or combee
        for row in out:
            if row["capacity"] == capacity:
                row["control_fails"] = (round(combee[0]["acc"] - row["acc"], 3) >= CONTROL_MARGIN
                                        if combee and row["variant"] in CONTROLS else None)
                row["not_worse_than_judge"] = (round(alone[0]["acc"] - row["acc"], 3) <= STANDIN_TOLERANCE
                                               if alone and row["variant"].startswith(STANDIN_PREFIX) else None)
    return out


COLUMNS = [("capacity", "C"), ("variant", "variant"), ("acc", "held-out acc"), ("acc_sd", "sd"),
           ("vs_sequential", "vs seq"), ("entries", "entries"), ("lessons", "lessons"),
           ("entries_per_lesson", "entries/lesson"), ("families_right", "rules held"),
           ("families_wrong", "opposite held"), ("families_both", "both"), ("unknown", "no lesson"),
           ("tokens_max", "max tokens"), ("within_budget", "in budget"), ("evictions", "evicted"),
           ("passes", "passes"), ("control_fails", "control fails by the margin"),
           ("not_worse_than_judge", "stand-in not worse than the judge alone")]


def table(rows: list[dict[str, Any]], columns: list[tuple[str, str]]) -> str:
    lines = ["| " + " | ".join(title for _, title in columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(row[key]) for key, _ in columns) + " |" for row in rows]
    return "\n".join(lines)


def main() -> None:
    # versions are built here without batch manifests, which the reducer warns of once per version
    logging.getLogger("combee_core.reduce.processor").setLevel(logging.ERROR)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", type=int, default=960, help="traces per run (two passes over the 480 train tasks)")
    parser.add_argument("--capacities", default="6,12,24")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--batch-sizes", default="", help="also run combee at these batch sizes ('combee bs N')")
    parser.add_argument("--budget", type=int, default=1000, help="playbook budget in tokens (docs/simulator.md)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    rows = []
    variants = args.variants.split(",") + [f"{BATCH_PREFIX}{int(n)}" for n in args.batch_sizes.split(",") if n]
    for capacity in (int(c) for c in args.capacities.split(",")):
        for variant in variants:
            for seed in (int(s) for s in args.seeds.split(",")):
                rows.append(asyncio.run(one(variant, capacity, seed, traces=args.traces, budget=args.budget)))
    summary = summarise(rows)
    checks = static_checks(build_suite(seed=7, feedback="honest"))
    honest_rows = [r for r in rows if variant_spec(r["variant"]).reflection == "honest"] or rows
    rates = {key: round(statistics.mean(r[key] for r in honest_rows), 3)
             for key in ("feedback_expected", "feedback_check", "feedback_outcome", "wrong_lesson_rate")}
    credited = sum(r["feedback_lines_credited"] for r in rows)
    print(f"honest mode, {args.traces} traces per run, budget {args.budget} tokens, seeds {args.seeds}")
    print(table(summary, COLUMNS))
    print("\nevery version against the budget (all seeds)")
    print(table(summary, [("capacity", "C"), ("variant", "variant"), ("versions_checked", "versions"),
                          ("versions_over_budget", "over budget"), ("tokens_max", "largest (tokens)")]))
    print("\nLLM calls per version after the reflector's (aggregator and reducer), mean over versions and seeds")
    print(table(summary, [("capacity", "C"), ("variant", "variant"), ("fan_in", "fan-in"),
                          ("aggregator_calls", "aggregator calls"), ("calls_per_version", "all calls")]))
    print("\nentries beyond one per lesson held (final playbook, mean over seeds)")
    print(table(summary, [("capacity", "C"), ("variant", "variant"), ("entries_per_lesson", "entries/lesson"),
                          ("extra_wordings", "extra wordings"), ("opposite_entries", "opposite rules"),
                          ("no_lesson_entries", "no lesson")]))
    print("\nwrong rules served (every version, mean over seeds): share of traces run with an opposite rule of their "
          "own family held, opposite-rule entries ever served, traces each was served for")
    print(table(summary, [("capacity", "C"), ("variant", "variant"), ("misled_share", "misled traces"),
                          ("wrong_entries_served", "wrong entries served"),
                          ("wrong_entry_traces_served", "traces served each")]))
    print(f"\nrealised (honest runs, mean): {rates}; feedback lines the registry credits, all runs: {credited}")
    print("\nwhat the scoring credits (held-out accuracy of hand-made playbooks; default_mode = the old scoring)")
    print(table(checks, [("playbook", "playbook"), ("honest", "honest scoring"), ("default_mode", "default scoring")]))
    write_results(args.out, {"args": vars(args) | {"out": str(args.out)}, "summary": summary, "rows": rows,
                             "static_checks": checks, "realised_rates": rates, "feedback_lines_credited": credited,
                             "control_margin": CONTROL_MARGIN, "machine": machine()})


if __name__ == "__main__":
    main()
