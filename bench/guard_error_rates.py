"""The live-trace guard's false-alarm rate and power, by simulation of its rule (``combee_core.guard.rule.alarms``,
the function the guard stage runs), with no broker: how often a version as good as its parent is rolled back, and how
often (and after how many traces) a worse one is.

Each run draws the parent's traces (success with probability ``p``), then the child's one at a time up to a horizon
(the traces a version gets before the next one replaces it), checking the rule after each, as the guard does.
``--mixed`` makes a fifth of the traces after the switch still name the parent (agents that lag: an async fleet).
A *run of K versions* alarms falsely with probability 1 - (1 - rate)^K at most (each version is judged against its
own parent, so the tests are not independent; the bound assumes the worst).

    python -m bench.guard_error_rates [--runs 1000] [--seed 0] [--alpha 0.05] [--tau 0.2] [--min-traces 30]
"""

from __future__ import annotations

import argparse
import random
import time

from combee_core.guard.rule import GuardRule, Sample, alarms

BASE_RATES = (0.3, 0.5, 0.8, 0.95)
SHAPES = ((40, 40), (100, 100), (100, 300), (300, 1000))
"""(parent traces, child horizon): a sync round of 40, and longer-lived versions."""
DROPS = (0.1, 0.2, 0.3)


def first_crossing(rule: GuardRule, rng: random.Random, p_parent: float, p_child: float, n_parent: int,
                   horizon: int, mixed: bool) -> int | None:
    """The child trace count at which the rule alarms, or None within the horizon."""
    parent, child = Sample(), Sample()
    for _ in range(n_parent):
        parent.add(float(rng.random() < p_parent))
    while child.n < horizon:
        if mixed and rng.random() < 0.2:
            parent.add(float(rng.random() < p_parent))
            continue
        child.add(float(rng.random() < p_child))
        if alarms(rule, child, parent):
            return child.n
    return None


def rate(rule: GuardRule, runs: int, seed: int, p_parent: float, p_child: float, shape: tuple[int, int],
         mixed: bool) -> tuple[float, int | None]:
    rng = random.Random(seed)
    stops = [first_crossing(rule, rng, p_parent, p_child, *shape, mixed) for _ in range(runs)]
    found = sorted(s for s in stops if s is not None)
    return len(found) / runs, (found[len(found) // 2] if found else None)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--tau", type=float, default=0.2)
    parser.add_argument("--min-traces", type=int, default=30)
    parser.add_argument("--mixed", action="store_true", help="a fifth of later traces still name the parent")
    args = parser.parse_args(argv)
    rule = GuardRule(alpha=args.alpha, tau=args.tau, min_traces=args.min_traces)
    started = time.perf_counter()
    print(f"{rule.describe()}; {args.runs} runs per cell, seed {args.seed}{', mixed' if args.mixed else ''}")
    shapes = "  ".join(f"{n}/{h}".ljust(10) for n, h in SHAPES)
    print(f"false alarms (no difference), by parent traces / child horizon:\n  p      {shapes}")
    for p in BASE_RATES:
        cells = [rate(rule, args.runs, args.seed, p, p, shape, args.mixed)[0] for shape in SHAPES]
        print(f"  {p:<5}  " + "  ".join(f"{c:<10.4f}" for c in cells))
    print("power (share of worse versions rolled back) [median child traces to the alarm], parent 0.8:")
    print(f"  drop   {shapes}")
    for drop in DROPS:
        cells = [rate(rule, args.runs, args.seed + 1, 0.8, 0.8 - drop, shape, args.mixed) for shape in SHAPES]
        print(f"  {drop:<5}  " + "  ".join(f"{share:.2f} [{median or '-':>3}]" for share, median in cells))
    print(f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
