"""What outcome credit does where the judge cannot relate a correction to its rule (issue 38: "outcomes must
decide"), through the reducer stage's processor with a naive model.

    python -m bench.naive_outcomes                        # sets A-G, 5 seeds: bench/results/naive_outcomes.json
    python -m bench.naive_outcomes --follow random --out naive_outcomes_random.json

``bench.naive_pipeline`` asks whether a correction restated in 3 batches supersedes its rule by restatement alone
(no outcomes). In a fleet the traces that teach a correction are mostly traces whose agent followed the wrong rule
and failed, and they carry ``used_entries`` and ``success``. Here the same naive reflector (ADDs a wording verbatim,
support 1) and echo reducer (``bench.naive_pipeline.make_reducer``: a non-simulator reducer model that says
nothing), one ``Reducer.next_version`` per batch with the default settings, plus agents that send outcomes.

**Agent model** (bench code, not the simulator; labels are the set's, which bench code may read and curation never
does; defaults in brackets). For each correction ``(rule, correction)`` of a set, with ``L`` the lesson whose
wordings include ``correction`` (set A's two unlisted corrections: :data:`UNLISTED`):

- version 1 learns the first rule (one ADD, support 2: evidence 1; with ``--background`` also the first wording of
  every other lesson of the set but the taught one, support 2 each); with ``--evidence E`` [0] version 2 restates it
  (support E: an established rule, evidence 1 + E). Then ``--batches`` [20] batches on the current version
  (``ran_version``), each of ``--lesson`` [6] traces on ``L``'s task and ``--baseline`` [6] traces on other tasks
  (success with probability ``--b`` [0.7], no used entries), split over ``--k`` [3] partials (trace ``j`` to
  partial ``j mod k``);
- an agent on ``L``'s task is served the current version; its *relevant* entries are those whose text is the wrong
  rule or a wording of ``L``. It follows one of them: ``--follow newest`` [default] the newest (highest created
  version, then entry number), ``--follow random`` one drawn uniformly; none when none is served;
- it fails with probability ``--q`` [0.8] when it followed the wrong rule, and succeeds with probability ``b``
  otherwise (followed a wording of ``L``, or nothing; ``--task_b`` sets another rate for these: a task harder than
  the others, where a right rule's agents do worse than the baseline);
- it cites (``used_entries``) every relevant entry served (``--cite relevant`` [default]) or only the one it
  followed (``--cite followed``, as ``honest_learning``'s "cited" variants), each citation independently wrong
  with probability ``--c`` [0.1]: half of the wrong ones omitted, half replaced by a random entry of the version
  that is not relevant (omitted when there is none). Baseline traces cite nothing;
- each failed trace on ``L``'s task (with probability ``--restate`` [1]) sends one ADD (support 1, in the batch it
  failed in) restating the lesson the failures teach: ``--wordings correction`` [default] the set's correction
  wording each time (as ``naive_pipeline``'s 3-batch column), ``--wordings all`` a wording of ``L`` drawn uniformly.

**Control** (the rule is right): the first rule is ``correction`` itself; agents that follow it succeed with ``b``
like everyone else, and the failures teach a *different* lesson of the set (the next one in the set's order), whose
entries are not relevant to ``L``'s task (cited only by a wrong citation). The first rule must stay: its removal is a
false removal. Each configuration also runs **without outcomes** (the partials carry none: today's behaviour), from
the same random draws until the playbooks differ.

Measured per case: the batch in which the first rule's entry went and how (superseded by a challenge, demoted by
outcomes, evicted), whether ``L`` has an entry at the end and the batches at whose end it had none after it had had
one (a right lesson lost), the traces on ``L``'s task served / following the wrong rule, and entries of ``L``
removed: demoted (a right entry lost to outcomes), or superseded (mostly one wording of ``L`` swapped for another).
Not Kafka and no LLM (as ``naive_pipeline``); never the held-out-for-measuring sets H and I.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import random
import statistics
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import machine, write_results
from bench.naive_pipeline import learn, make_reducer
from combee_core.models import AddOp, Operation, PartialUpdate, PlaybookEntry, PlaybookVersion, TraceOutcome
from combee_core.playbook import Playbook
from combee_core.playbook.onnx_embedding import MiniLMEmbedder
from combee_core.playbook.outcomes import UNIT
from combee_core.playbook.value import entry_sort_key
from combee_core.processors.effects import Publish
from combee_core.reduce.processor import Reducer

DATA = Path(__file__).parent / "data"
RESULTS = Path(__file__).parent / "results" / "naive_outcomes.json"
NOW = datetime(2026, 1, 1, tzinfo=UTC)
SETS = ["lessons_heldout", "lessons_heldout_b", "lessons_heldout_c", "lessons_heldout_d", "lessons_heldout_e",
        "lessons_heldout_f", "lessons_heldout_g"]
"""Sets A-G (seen). Never H or I: held out for measuring."""
SECTION = "rules"
UNLISTED = {
    "Tax must be calculated on the discounted amount, so take the discount off before tax.": "discount-tax",
    "To find the latest order, sort dates in descending order and take the first row.": "latest-order",
}
"""Set A's two corrections that are no wording of its ``lessons``, labelled here by reading them: the lesson each
restates (its wordings and the correction are the right lesson's texts)."""


@dataclass(frozen=True)
class Params:
    """The agent model's parameters (module docstring)."""

    evidence: int = 0
    """Restatements of the first rule before the flow (one batch of that many traces): its evidence 1 + this."""
    restate: float = 1.0
    background: bool = False
    """Version 1 also learns one wording of every other lesson of the set (a playbook of the set's size, not one entry:
    the majority rule lets no version remove the only entry of a one-entry playbook)."""
    """Probability that a failed trace on the lesson's task restates the lesson the failures teach."""
    lesson: int = 6
    baseline: int = 6
    b: float = 0.7
    task_b: float = -1.0
    """Success of an agent on the lesson's task that did not follow the wrong rule; below 0: ``b``."""
    q: float = 0.8
    c: float = 0.1
    batches: int = 20
    k: int = 3
    follow: str = "newest"
    cite: str = "relevant"
    wordings: str = "correction"


@dataclass(frozen=True)
class Case:
    """One correction of a set, as the wrong-rule flow or its control."""

    kind: str
    """``wrong`` (the first rule is the set's wrong rule) or ``control`` (it is the correction, a right rule)."""
    first: str
    background: tuple[str, ...]
    """The first wording of every lesson of the set but the task's and the taught one."""
    relevant: frozenset[str]
    """Texts of entries an agent on the task cites and may follow."""
    harmful: str | None
    """The text whose agents fail with ``q`` (None: none)."""
    teaches: tuple[str, ...]
    """What the failed traces restate (one drawn per failed trace)."""
    right: frozenset[str]
    """The task's right lesson's wordings: its entries must not be lost."""


def cases(data: dict[str, Any], wordings: str) -> list[Case]:
    """The wrong-rule case and the control of each correction of ``data``."""
    lessons = data["lessons"]
    index = {text: n for n, lesson in enumerate(lessons) for text in lesson["texts"]}
    ids = {lesson["id"]: n for n, lesson in enumerate(lessons)}
    found = []
    for item in data.get("corrections", []):
        n = index[item["correction"]] if item["correction"] in index else ids[UNLISTED[item["correction"]]]
        texts = tuple(dict.fromkeys([*lessons[n]["texts"], item["correction"]]))
        other = tuple(lessons[(n + 1) % len(lessons)]["texts"])
        background = tuple(lesson["texts"][0] for m, lesson in enumerate(lessons) if m not in (n, (n + 1) % len(
            lessons)))
        found.append(Case("wrong", item["rule"], background, frozenset({item["rule"], *texts}), item["rule"],
                          texts if wordings == "all" else (item["correction"],), frozenset(texts)))
        found.append(Case("control", item["correction"], background, frozenset(texts), None,
                          other if wordings == "all" else (other[0],), frozenset(texts)))
    return found


def followed(relevant: list[PlaybookEntry], follow: str, rng: random.Random) -> PlaybookEntry | None:
    """The entry an agent follows among the ``relevant`` ones served (module docstring)."""
    if not relevant:
        return None
    if follow == "random":
        return relevant[rng.randrange(len(relevant))]
    return max(relevant, key=lambda e: (e.created_version, entry_sort_key(e)[1]))


def citations(relevant: list[PlaybookEntry], others: list[PlaybookEntry], c: float, rng: random.Random) -> list[str]:
    """The ids an agent reports using: each relevant entry, wrong with probability ``c`` (omitted, or another)."""
    cited = []
    for entry in relevant:
        if rng.random() >= c:
            cited.append(entry.entry_id)
        elif rng.random() < 0.5 and others:
            cited.append(others[rng.randrange(len(others))].entry_id)
    return sorted(set(cited))


async def step(reducer: Reducer, playbook: Playbook, traces: list[tuple[str, TraceOutcome, list[str]]], k: int,
               batch_id: int, send_outcomes: bool) -> tuple[Playbook, PlaybookVersion]:
    """One batch through ``Reducer.next_version``: ``traces`` (id, outcome, texts it ADDs) over ``k`` partials."""
    partials = []
    for node in range(k):
        mine = traces[node::k]
        ops: list[Operation] = [AddOp(section=SECTION, content=text) for _, _, adds in mine for text in adds]
        ids = sorted(t for t, _, _ in mine)
        partials.append(PartialUpdate(
            playbook_id=playbook.playbook_id, batch_id=batch_id, node=node, k=k, base_version=playbook.version,
            operations=ops, reflection_ids=[f"r-{t}" for t in ids], trace_ids=ids, items_read=len(ids),
            expected_items=len(ids), batch_closed_at=NOW,
            outcomes=sorted((o for _, o, _ in mine), key=lambda o: o.trace_id) if send_outcomes else []))
    effects = await reducer.next_version(playbook, partials, parent_version=None, manifest=None, previous_at=None,
                                         now=NOW)
    [record] = [e.value for e in effects if isinstance(e, Publish) and isinstance(e.value, PlaybookVersion)]
    return Playbook.from_entries(record.playbook_id, record.version, record.entries, record.next_entry_number,
                                 record.curation, baseline=record.baseline, challenges=record.challenges), record


def how_removed(reason: str) -> str:
    for prefix, name in (("demoted by outcomes", "demoted"), ("superseded", "superseded")):
        if reason.startswith(prefix):
            return name
    return "evicted" if "evict" in reason else "other"


async def run_case(reducer: Reducer, case: Case, p: Params, seed: int, send_outcomes: bool) -> dict[str, Any]:
    """One case, one seed: the batches of the module docstring's agent model."""
    rng = random.Random(f"{seed}/{case.kind}/{case.first}")
    playbook, _ = await learn(reducer, Playbook.empty(f"outnaive-{seed}"), [
        AddOp(section=SECTION, content=case.first, support=2),
        *(AddOp(section=SECTION, content=text, support=2) for text in (case.background if p.background else ()))], 1, 0)
    if p.evidence:
        playbook, _ = await learn(reducer, playbook, [AddOp(section=SECTION, content=case.first, support=p.evidence)],
                                  1, 1)
    first = next(e for e in playbook.entries if e.content == case.first)
    gone: dict[str, Any] | None = None
    served_wrong = followed_wrong = 0
    right_removed: list[dict[str, Any]] = []
    had_right, lost_batches = False, 0
    for batch in range(1, p.batches + 1):
        relevant = [e for e in playbook.entries if e.content in case.relevant]
        others = [e for e in playbook.entries if e.content not in case.relevant]
        traces: list[tuple[str, TraceOutcome, list[str]]] = []
        for i in range(p.lesson):
            entry = followed(relevant, p.follow, rng)
            wrong = entry is not None and entry.content == case.harmful
            served_wrong += any(e.content == case.harmful for e in relevant)
            followed_wrong += wrong
            success = rng.random() >= p.q if wrong else rng.random() < (p.b if p.task_b < 0 else p.task_b)
            used = citations(relevant if p.cite == "relevant" else [entry] if entry else [], others, p.c, rng)
            adds = [] if success or rng.random() >= p.restate else [case.teaches[rng.randrange(len(case.teaches))]]
            trace_id = f"b{batch:03d}-l{i:02d}"
            traces.append((trace_id, TraceOutcome(trace_id=trace_id, ran_version=playbook.version,
                                                  success=UNIT if success else 0, used=used), adds))
        for i in range(p.baseline):
            trace_id = f"b{batch:03d}-o{i:02d}"
            traces.append((trace_id, TraceOutcome(trace_id=trace_id, ran_version=playbook.version,
                                                  success=UNIT if rng.random() < p.b else 0), []))
        playbook, record = await step(reducer, playbook, traces, p.k, 1 + batch, send_outcomes)
        for applied in record.operations:
            if applied.operation.op != "DELETE" or applied.outcome != "applied":
                continue
            if applied.entry_id == first.entry_id and gone is None:
                gone = {"batch": batch, "how": how_removed(applied.reason), "reason": applied.reason[:300]}
            removed = next((e for e in relevant + others if e.entry_id == applied.entry_id), None)
            if removed is not None and removed.content in case.right and removed.entry_id != first.entry_id:
                right_removed.append({"batch": batch, "how": how_removed(applied.reason), "text": removed.content,
                                      "reason": applied.reason[:400]})
        has_right = any(e.content in case.right for e in playbook.entries)
        had_right = had_right or has_right
        lost_batches += had_right and not has_right
    return {"kind": case.kind, "first": case.first, "seed": seed, "outcomes": send_outcomes, "gone": gone,
            "right_lesson_at_end": any(e.content in case.right for e in playbook.entries),
            "batches_right_lesson_lost": lost_batches,
            "served_wrong": served_wrong, "followed_wrong": followed_wrong, "right_removed": right_removed,
            "entries_at_end": len(playbook), "pending_challenges": len(playbook.challenges)}


def notable_run(run: dict[str, Any]) -> bool:
    """A run the results file keeps: anything but a wrong rule superseded in the first batch, or a control whose
    first rule stayed, with no right entry removed and the right lesson never lost."""
    expected = (run["gone"] is not None and run["gone"]["batch"] == 1) if run["kind"] == "wrong" else (
        run["gone"] is None)
    return not expected or bool(run["right_removed"]) or run["batches_right_lesson_lost"] > 0


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts over the runs of one set, kind and outcomes flag."""
    gone = [r["gone"] for r in runs if r["gone"] is not None]
    return {"runs": len(runs), "first_rule_gone": len(gone),
            "superseded": sum(g["how"] == "superseded" for g in gone),
            "demoted": sum(g["how"] == "demoted" for g in gone),
            "median_batch_gone": statistics.median(g["batch"] for g in gone) if gone else None,
            "right_lesson_at_end": sum(r["right_lesson_at_end"] for r in runs),
            "right_entries_demoted": sum(x["how"] == "demoted" for r in runs for x in r["right_removed"]),
            "right_entries_superseded": sum(x["how"] == "superseded" for r in runs for x in r["right_removed"]),
            "runs_losing_right_lesson": sum(r["batches_right_lesson_lost"] > 0 for r in runs),
            "served_wrong_mean": round(statistics.fmean(r["served_wrong"] for r in runs), 1),
            "followed_wrong_mean": round(statistics.fmean(r["followed_wrong"] for r in runs), 1),
            "entries_at_end_mean": round(statistics.fmean(r["entries_at_end"] for r in runs), 2)}


async def main_async(args: argparse.Namespace, p: Params) -> dict[str, Any]:
    reducer = make_reducer(MiniLMEmbedder())
    results: dict[str, Any] = {}
    for set_name in args.sets:
        if set_name.startswith(("lessons_heldout_h", "lessons_heldout_i")):
            raise SystemExit(f"{set_name} is held out for measuring: not run here")
        data = json.loads((DATA / f"{set_name}.json").read_text())
        runs = [await run_case(reducer, case, p, seed, send)
                for case in cases(data, p.wordings) for seed in range(args.seeds) for send in (True, False)]
        notable = [r for r in runs if notable_run(r)]
        results[set_name] = {"runs": runs, "notable_runs": notable, "summary": {
            f"{kind} {'with' if send else 'without'} outcomes": summary(
                [r for r in runs if r["kind"] == kind and r["outcomes"] == send])
            for kind in ("wrong", "control") for send in (True, False)}}
    return results


def label(set_name: str) -> str:
    """``A`` for ``lessons_heldout``, ``G`` for ``lessons_heldout_g``; other names as they are."""
    if set_name == "lessons_heldout":
        return "A"
    return set_name.removeprefix("lessons_heldout_").upper() if set_name.startswith("lessons_heldout_") else set_name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sets", nargs="+", default=SETS, help="files of bench/data, no suffix (never H or I)")
    parser.add_argument("--seeds", type=int, default=5)
    defaults = Params()
    for name, value in vars(defaults).items():
        if isinstance(value, bool):
            parser.add_argument(f"--{name}", action="store_true")
        else:
            parser.add_argument(f"--{name}", type=type(value), default=value)
    parser.add_argument("--out", default=RESULTS.name, help="results file name under bench/results")
    args = parser.parse_args()
    p = Params(**{name: getattr(args, name) for name in vars(defaults)})
    if p.follow not in ("newest", "random") or p.cite not in ("relevant", "followed") or p.wordings not in (
            "correction", "all"):
        parser.error("--follow newest|random, --cite relevant|followed, --wordings correction|all")
    logging.basicConfig(level=logging.ERROR)  # the stage's per-batch lines (no manifest here) are not figures
    results = asyncio.run(main_async(args, p))
    print(f"{p}; seeds 0..{args.seeds - 1}; naive reflector, echo reducer, default settings")
    print("| set | flow | outcomes | first rule gone (superseded / demoted) | median batch gone | right lesson at "
          "end | right entries removed | traces served / following the wrong rule (mean per case) |")
    print("|---|---|---|---|---|---|---|---|")
    rows: list[tuple[str, dict[str, Any]]] = [(name, r["summary"]) for name, r in results.items()]
    totals = {key: summary([run for r in results.values() for run in r["runs"]
                            if f"{run['kind']} {'with' if run['outcomes'] else 'without'} outcomes" == key])
              for key in rows[0][1]}
    for name, summaries in [*rows, ("A-G" if args.sets == SETS else "all", totals)]:
        for key, s in summaries.items():
            kind, _, flag = key.partition(" ")
            print(f"| {label(name)} | {kind} | {flag.split()[0]} | {s['first_rule_gone']}/{s['runs']} "
                  f"({s['superseded']} / {s['demoted']}) | {s['median_batch_gone']} | "
                  f"{s['right_lesson_at_end']}/{s['runs']} | {s['runs_losing_right_lesson']} | "
                  f"{s['right_entries_demoted']} ({s['right_entries_superseded']}) | {s['served_wrong_mean']} / "
                  f"{s['followed_wrong_mean']} |")
    kept = {name: {"summary": r["summary"], "runs": len(r["runs"]), "notable_runs": r["notable_runs"]}
            for name, r in results.items()}
    write_results(RESULTS.with_name(args.out), {
        "params": vars(p), "seeds": args.seeds, "sets": args.sets, "totals": totals, "results": kept,
        "notable_runs": "runs other than a wrong rule superseded in batch 1 or a control whose first rule stayed, "
        "without a right entry removed or the right lesson lost (the others are only counted)", "machine": machine()})


if __name__ == "__main__":
    main()
