"""The quality bound on the batch size (``controller_bs_max``): held-out accuracy of Combee at large batches.

    python -m bench.quality_bound [--sizes 40,100,160,240] [--capacities 12,6] [--seeds 0,1,2] [--out bench/results]

The same runs as ``bench.quality_delay`` (one pass over the 480 train traces, the final playbook scored on the 120
held-out tasks, simulator clock virtual so machine load does not change a figure), for Combee (p 2) at each
``--sizes`` batch size: how large a batch may get before quality falls. The streaming controller grows the batch
with the arrival rate up to this bound (docs/operations.md, "Capacity and overload").
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from bench.common import Variant, machine, write_results
from bench.quality_delay import run_all, table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="40,100,160,240")
    parser.add_argument("--capacities", default="12,6")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args(argv)
    variants = [Variant(f"combee bs {size}, p 2", int(size), p=2) for size in args.sizes.split(",")]
    results = asyncio.run(run_all([int(c) for c in args.capacities.split(",")],
                                  [int(s) for s in args.seeds.split(",")], variants))
    text, rows = table(results)
    print(text)
    write_results(args.out / "quality_bound.json", dict(machine=machine(), rows=rows,
                                                        runs=[r.model_dump() for r in results]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
