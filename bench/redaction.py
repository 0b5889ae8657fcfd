"""Cost of redaction at ingest: traces per second through ``combee_core.ingest.redaction.redact_trace``.

    python -m bench.redaction [--traces 3000] [--out bench/results]

Redacts ``--traces`` simulated traces (the suite's, no personal data: the common case, every detector scans and
finds nothing) and the same traces with personal data and secrets seeded in every text field
(``tests/seeded_personal_data.py``: 23 replacements each), with the built-in detectors and one user pattern, and
prints traces/s, µs per trace and µs per KB of trace JSON (CPU time of this process).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from bench.common import machine, write_results
from combee_core.ingest.redaction import ALL_BUILT_IN, RedactionConfig, parse_patterns, redact_trace
from combee_core.sim.task_suite import build_suite, train_traces
from tests.seeded_personal_data import EMPLOYEE_PATTERN, seeded_trace


def measure(traces: list, config: RedactionConfig) -> dict[str, float]:
    size = sum(len(trace.to_json_bytes()) for trace in traces)
    started = time.process_time()
    replaced = sum(sum(redact_trace(trace, config)[1].values()) for trace in traces)
    spent = time.process_time() - started
    return {"traces": len(traces), "traces_per_s": round(len(traces) / spent), "us_per_trace":
            round(1e6 * spent / len(traces), 1), "us_per_kb": round(1e6 * spent / (size / 1024), 1),
            "bytes_per_trace": round(size / len(traces)), "replacements_per_trace": round(replaced / len(traces), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=3000)
    parser.add_argument("--out", default="bench/results")
    args = parser.parse_args()
    plain = train_traces(build_suite(seed=7), args.traces, playbook_ids=("bench",), run_seed=1, agents=40)
    config = RedactionConfig(detectors=parse_patterns(EMPLOYEE_PATTERN) + ALL_BUILT_IN)
    rows = {"simulated (nothing to find)": measure(plain, config),
            "seeded (personal data in every field)": measure([seeded_trace(t, n) for n, t in enumerate(plain)],
                                                             config)}
    print(f"{'traces':<40} {'traces/s':>9} {'µs/trace':>9} {'µs/KB':>7} {'bytes':>6} {'replaced':>9}")
    for name, row in rows.items():
        print(f"{name:<40} {row['traces_per_s']:>9} {row['us_per_trace']:>9} {row['us_per_kb']:>7} "
              f"{row['bytes_per_trace']:>6} {row['replacements_per_trace']:>9}")
    write_results(Path(args.out) / "redaction.json", {"machine": machine(), "rows": rows})


if __name__ == "__main__":
    main()
