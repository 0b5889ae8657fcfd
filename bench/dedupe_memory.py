"""Memory of the batcher's dedupe horizon: bytes per remembered trace id, and the time to batch a trace.

    python -m bench.dedupe_memory [--traces 200000] [--horizons 10000,100000,1000000] [--out bench/results]

Feeds ``--traces`` reflections of one playbook (trace ids are UUID strings, as the examples produce them) through a
``BatchAccumulator`` at batch size 40 for each horizon, and measures with tracemalloc the memory the accumulator
still holds afterwards (its remembered ids; the reflections themselves are released once dealt) and the time per
trace. Past the horizon the memory stops growing: that is the bound ``dedupe_horizon`` buys.
"""

from __future__ import annotations

import argparse
import gc
import time
import tracemalloc
import uuid
from datetime import datetime, timezone
from pathlib import Path

from bench.common import machine, write_results
from combee_core.batch.batching import BatchAccumulator, ShuffleConfig
from combee_core.models import Insight, Reflection

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
BATCH_SIZE = 40


def measure(traces: int, horizon: int) -> dict[str, float]:
    """Batch ``traces`` fresh traces with the given horizon; memory held and time per trace."""
    insight = [Insight(section="general", content="check the unit before converting")]
    template = Reflection(reflection_id="r", trace_id="t", playbook_id="bench", seen_version=0, insights=insight,
                          model="sim")
    gc.collect()
    tracemalloc.start()
    accumulator = BatchAccumulator(ShuffleConfig(p=1, subgroups="single"), BATCH_SIZE, dedupe_horizon=horizon)
    started = time.perf_counter()
    for i in range(traces):
        trace_id = str(uuid.UUID(int=i))  # made here, as a worker parses it: the horizon alone keeps it alive
        digest = f"{i:016x}"  # as Trace.digest() gives it: 16 hex characters, kept to tell conflicts from resends
        accumulator.add(template.model_copy(update={"trace_id": trace_id, "reflection_id": trace_id,
                                                    "trace_digest": digest}), 0.0, NOW)
    elapsed = time.perf_counter() - started
    gc.collect()
    held, _peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    remembered = min(traces, horizon)
    return {
        "traces": traces,
        "horizon": horizon,
        "remembered": remembered,
        "forgotten": accumulator.forgotten("bench"),
        "held_mb": held / 1e6,
        "bytes_per_remembered_id": held / remembered,
        "us_per_trace": elapsed / traces * 1e6,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", type=int, default=200_000)
    parser.add_argument("--horizons", default="10000,100000,1000000")
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args(argv)
    rows = [measure(args.traces, int(h)) for h in args.horizons.split(",")]
    print(f"{'traces':>8} {'horizon':>9} {'remembered':>10} {'forgotten':>9} {'held MB':>8} {'B/id':>6} "
          f"{'us/trace':>8}")
    for row in rows:
        print(f"{row['traces']:>8} {row['horizon']:>9} {row['remembered']:>10} {row['forgotten']:>9} "
              f"{row['held_mb']:>8.1f} {row['bytes_per_remembered_id']:>6.0f} {row['us_per_trace']:>8.1f}")
    write_results(args.out / "dedupe_memory.json", {"machine": machine(), "batch_size": BATCH_SIZE, "rows": rows})
    print(f"wrote {args.out / 'dedupe_memory.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
