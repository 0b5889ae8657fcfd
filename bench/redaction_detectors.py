"""Which secret detector: the project's own rules, detect-secrets' plugins, or both (docs/redaction.md, "Why this
library"; docs/benchmarks-history.md §14).

    python -m bench.redaction_detectors [--traces 1000] [--out bench/results]

For each chain of detectors prints: leaks on the hand-written corpus (tests/redaction_corpus.py: cases whose values
survive, secrets and all), false positives (ordinary lessons changed; every lesson the simulator can write; simulated
traces changed), CPU per trace (simulated traces with nothing to find, and the same traces with the corpus seeded
in their feedback) and per corpus line, and the installed size of the library.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common import machine, write_results
from combee_core.ingest.detectors import OWN_DETECTORS
from combee_core.ingest.redaction import RedactionConfig, Redactor, SpanFinder, redact_trace
from combee_core.ingest.secret_library import LibraryDetector
from combee_core.models import Trace
from combee_core.sim.sim_registry import registry_for
from combee_core.sim.task_suite import build_suite, train_traces
from tests.redaction_corpus import ORDINARY_LESSONS, SECRETS

PII = (OWN_DETECTORS["email"], OWN_DETECTORS["card"], OWN_DETECTORS["phone"])
CHAINS: dict[str, tuple[SpanFinder, ...]] = {
    "own rules": (OWN_DETECTORS["secret"], *PII),
    "detect-secrets only (+ own PII)": (LibraryDetector(), *PII),
    "detect-secrets, then own rules (chosen)": (LibraryDetector(), OWN_DETECTORS["secret"], *PII),
}


class PresidioDetector:
    """Presidio's pattern recognizers for e-mails, cards and phones (no spaCy model: they take no NLP artifacts),
    measured where ``presidio-analyzer`` is installed (it is not a dependency: pip install presidio-analyzer in a
    scratch virtualenv and run this script there)."""

    name = "PII"

    def __init__(self) -> None:
        from presidio_analyzer.predefined_recognizers import CreditCardRecognizer, EmailRecognizer, PhoneRecognizer

        self.recognizers = [EmailRecognizer(), CreditCardRecognizer(), PhoneRecognizer()]

    def spans(self, text: str) -> list[tuple[int, int]]:
        found = sorted((r.start, r.end) for recognizer in self.recognizers
                       for r in recognizer.analyze(text, recognizer.supported_entities, None))
        merged: list[tuple[int, int]] = []
        for start, end in found:
            if merged and start <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
            else:
                merged.append((start, end))
        return merged


def presidio_chain() -> dict[str, tuple[SpanFinder, ...]]:
    try:
        return {"own secrets + presidio PII": (OWN_DETECTORS["secret"], PresidioDetector())}
    except ImportError:
        return {}


def installed_size(package: str) -> int:
    """Bytes of an installed distribution's files."""
    from importlib.metadata import distribution

    files = distribution(package).files or []
    return sum(path.stat().st_size for path in (Path(str(f.locate())) for f in files) if path.exists())


def seeded(trace: Trace, n: int) -> Trace:
    case = SECRETS[n % len(SECRETS)]
    return trace.model_copy(update={"feedback": f"{trace.feedback}\n{case.text}"})


def cpu_per(items: Sequence[Any], work: Any) -> float:
    started = time.process_time()
    for item in items:
        work(item)
    return 1e6 * (time.process_time() - started) / len(items)


def measure(detectors: tuple[SpanFinder, ...], traces: list[Trace], lessons: list[str]) -> dict[str, Any]:
    config = RedactionConfig(detectors=detectors)

    def text(value: str) -> str:
        return Redactor(config).text(value)

    secrets = [case for case in SECRETS if case.kind not in ("email", "card", "phone")]
    leaked = [case for case in SECRETS if any(value in text(case.text) for value in case.values)]
    return {
        "secret_cases_leaked": sum(case in leaked for case in secrets), "secret_cases": len(secrets),
        "all_cases_leaked": len(leaked), "all_cases": len(SECRETS),
        "leaked_kinds": sorted({case.kind for case in leaked}),
        "ordinary_lessons_changed": sum(text(lesson) != lesson for lesson in ORDINARY_LESSONS),
        "ordinary_lessons": len(ORDINARY_LESSONS),
        "simulator_lessons_changed": sum(text(lesson) != lesson for lesson in lessons),
        "simulator_lessons": len(lessons),
        "simulated_traces_changed": sum(redact_trace(t, config)[0] != t for t in traces),
        "us_per_simulated_trace": round(cpu_per(traces, lambda t: redact_trace(t, config)), 1),
        "us_per_seeded_trace": round(cpu_per([seeded(t, n) for n, t in enumerate(traces)],
                                             lambda t: redact_trace(t, config)), 1),
        "us_per_corpus_line": round(cpu_per([c.text for c in SECRETS] * 5, text), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=1000)
    parser.add_argument("--out", default="bench/results")
    args = parser.parse_args()
    traces = train_traces(build_suite(seed=7), args.traces, playbook_ids=("bench",), run_seed=1, agents=40)
    registry = registry_for(7, 32)
    lessons = sorted({t for texts in registry.wordings.values() for t in texts}
                     | {t for texts in registry.hints.values() for t in texts})
    LibraryDetector().spans("warm up: password='x1y2z3w4'")
    rows = {name: measure(chain, traces, lessons) for name, chain in {**CHAINS, **presidio_chain()}.items()}
    print(f"{'chain':<42} {'secret leaks':>12} {'all leaks':>9} {'FP lessons':>10} {'FP sim':>6} "
          f"{'FP traces':>9} {'µs/trace':>8} {'µs/seeded':>9} {'µs/line':>7}")
    for name, row in rows.items():
        print(f"{name:<42} {row['secret_cases_leaked']:>5}/{row['secret_cases']:<6} "
              f"{row['all_cases_leaked']:>3}/{row['all_cases']:<5} "
              f"{row['ordinary_lessons_changed']:>3}/{row['ordinary_lessons']:<6} "
              f"{row['simulator_lessons_changed']:>6} {row['simulated_traces_changed']:>9} "
              f"{row['us_per_simulated_trace']:>8} {row['us_per_seeded_trace']:>9} "
              f"{row['us_per_corpus_line']:>7}")
    size = installed_size("detect-secrets")
    print(f"detect-secrets installed: {size / 1e6:.1f} MB (its dependencies pyyaml and requests are already here); "
          f"simulator lessons: {len(lessons)}, simulated traces: {len(traces)}")
    write_results(Path(args.out) / "redaction_detectors.json",
                  {"machine": machine(), "rows": rows, "detect_secrets_bytes": size})


if __name__ == "__main__":
    main()
