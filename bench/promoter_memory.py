"""Memory a promoter holds after N versions, pruning what it no longer reads or keeping everything.

    python -m bench.promoter_memory [--versions 100,300,1000] [--out bench/results]

One playbook; each version is a manifest, a candidate (its parent's last 19 entries and a new one, so a playbook of
20 entries) and a decision, every record a copy decoded from JSON as a view would read it. The promoter requests
the held-out results (the default set: 120 tasks) of each new content, each is answered at once with the served
version's score plus or minus 0.0001 (about half are promoted), and it decides. Measured with tracemalloc: the
memory the promoter holds afterwards, the part its ledger's decisions hold (each with its served version's 20
entries), and what it holds of each structure. ``keep`` is
``Promoter(keep_everything=True)``, the promoter before pruning (``combee_core.promote.promoter_memory``);
``prune`` the default.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import random
import tracemalloc
from datetime import UTC, datetime
from pathlib import Path

from bench.common import machine, write_results
from combee_core.models import (
    BatchManifest,
    EvalRequest,
    EvalResult,
    PlaybookEntry,
    PlaybookVersion,
    PromotionDecision,
    ProposerModels,
    TaskSetVersion,
    Usage,
    VersionStats,
    tasks_digest,
)
from combee_core.processors.effects import Publish
from combee_core.promote.processor import Promoter
from combee_core.promote.promotion import PromotionRule, next_base
from combee_core.sim.task_set import SUITE_SET, suite_tasks
from combee_core.sim.task_suite import build_suite

NOW = datetime(2026, 1, 1, tzinfo=UTC)
PLAYBOOK = "bench"


async def _nothing() -> None:
    return None


async def run(versions: int, keep_everything: bool, seed: int = 0) -> tuple[Promoter, dict[str, float]]:
    """The promoter after ``versions`` decided versions (its ledger's decisions dropped), the MB it held and the MB
    its ledger's decisions held."""
    rng = random.Random(seed)
    suite = build_suite(families=24, seed=7)
    gc.collect()
    tracemalloc.start()
    tasks = suite_tasks(suite)
    held_out = TaskSetVersion(name=SUITE_SET, version=1, tasks=tasks, digest=tasks_digest(tasks), registered_at=NOW)
    promoter = Promoter(PromotionRule(epsilon=0.0), {"*": SUITE_SET},
                       ProposerModels(reflector="r", aggregator="a", reducer="d"), task_sets=[held_out],
                       keep_everything=keep_everything)
    entries: dict[int, list[PlaybookEntry]] = {0: []}
    served_score = 0.5
    for version in range(1, versions + 1):
        promoter.apply_manifest(BatchManifest.model_validate_json(BatchManifest(
            playbook_id=PLAYBOOK, batch_id=version - 1, base_version=version - 1, trace_ids=[f"t{version}"],
            reflection_ids=[f"r{version}"], n=1, k=1, p=1, seed=0, subgroup_sizes=[1], target_batch_size=1,
            closed_by="size", closed_at=NOW, reflection_usage=Usage(calls=3, cost_usd=0.01)).model_dump_json()))
        base = next_base(promoter.ledger, PLAYBOOK, version - 1)
        assert base is not None
        parent = base.entries if base.entries is not None else entries[version - 1]
        entries[version] = [*parent[-19:], PlaybookEntry(
            entry_id=f"e{version}", section="tools", content=f"lesson {version}: check the unit before converting",
            created_version=version, updated_version=version)]
        entries.pop(version - 2, None)
        promoter.apply_version(PlaybookVersion.model_validate_json(PlaybookVersion(
            playbook_id=PLAYBOOK, version=version, parent_version=base.parent_version, batch_id=version - 1,
            entries=entries[version], next_entry_number=version + 1, operations=[], lineage=[f"t{version}"],
            stats=VersionStats(batch_size=1, k=1, p=1, llm_calls=2), content_hash=f"{version:064x}",
            published_at=NOW).model_dump_json()))
        score = served_score + rng.choice((-1e-4, 1e-4))  # about half promoted, whatever the run's length
        while True:
            effects = [e.value for e in await promoter.advance(PLAYBOOK, None, NOW, _nothing) if isinstance(e, Publish)]
            decided = [d for d in effects if isinstance(d, PromotionDecision)]
            if decided:
                promoter.apply_decision(PromotionDecision.model_validate_json(decided[0].model_dump_json()))
                served_score = score if decided[0].action == "promote" else served_score
                break
            for request in [r for r in effects if isinstance(r, EvalRequest)]:
                promoter.apply_result(EvalResult(
                    request_id=request.request_id, playbook_id=PLAYBOOK, digest=request.digest,
                    task_id=request.task_id, score=score, evaluator="sim", evaluator_model="sim", evaluated_at=NOW))
    del entries, suite
    gc.collect()
    held, _peak = tracemalloc.get_traced_memory()
    decisions = len(promoter.ledger.by_candidate[PLAYBOOK])
    promoter.ledger.by_candidate.clear()  # what the ledger's decisions hold: the rest, once they are gone
    promoter.ledger.first_on_candidate.clear()
    gc.collect()
    rest, _peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return promoter, {"held_mb": held / 1e6, "ledger_mb": (held - rest) / 1e6, "decisions": decisions}


def measure(versions: int, keep_everything: bool) -> dict[str, float | int | str]:
    promoter, held = asyncio.run(run(versions, keep_everything))
    return {
        "mode": "keep" if keep_everything else "prune",
        "versions": versions,
        **held,
        "bytes_per_version_but_ledger": (held["held_mb"] - held["ledger_mb"]) * 1e6 / versions,
        "results": len(promoter.cache.results),
        "summaries": len(promoter.cache.summaries),
        "costs": len(promoter.costs[PLAYBOOK]),
        "usages": len(promoter.reflection_usage[PLAYBOOK]),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--versions", default="100,300,1000")
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args(argv)
    rows = [measure(int(n), keep) for keep in (True, False) for n in args.versions.split(",")]
    print(f"{'mode':>5} {'versions':>8} {'held MB':>8} {'ledger MB':>9} {'B/version but ledger':>20} {'results':>8} "
          f"{'summaries':>9} {'costs':>6} {'usages':>6} {'decisions':>9}")
    for row in rows:
        print(f"{row['mode']:>5} {row['versions']:>8} {row['held_mb']:>8.1f} {row['ledger_mb']:>9.1f} "
              f"{row['bytes_per_version_but_ledger']:>20.0f} {row['results']:>8} {row['summaries']:>9} "
              f"{row['costs']:>6} {row['usages']:>6} {row['decisions']:>9}")
    write_results(args.out / "promoter_memory.json", {"machine": machine(), "rows": rows})
    print(f"wrote {args.out / 'promoter_memory.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
