"""What OTLP ingest costs per span, in one process: decoding a record (opentelemetry-proto), assembling runs and
mapping each to a Trace (``combee_core.otlp.processor``), without Kafka.

    python -m bench.otlp_ingest [--runs 2000] [--spans-per-record 50] [--out bench/results]

A toy agent instrumented with the OpenTelemetry SDK (``streams/testing/otel_agent.py``: an ``invoke_agent`` span
with a ``chat`` and an ``execute_tool`` span, GenAI message attributes and an evaluation event) makes ``--runs``
runs; their spans are cut into records of ``--spans-per-record`` spans, encoded as ``otlp_proto`` and as
``otlp_json``, and fed to the processor, which is then ticked once. It prints records, spans and traces per second
of CPU time for each encoding. It does not measure the broker, the receiver's HTTP, nor a Collector.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from bench.common import machine, write_results
from combee_core.otlp.assembler import TraceAssembler
from combee_core.otlp.processor import OtlpIngest
from combee_core.otlp.wire import decode_spans, encode_request
from combee_core.processors.effects import Publish
from combee_core.sim.task_suite import build_suite, train_traces
from streams.testing.otel_agent import export_request, run_agent, tracer_provider


def measure(records: list[bytes], runs: int) -> dict[str, float]:
    ingest = OtlpIngest(TraceAssembler(max_pending=runs + 1))
    spans = 0
    started = time.process_time()
    for index, record in enumerate(records):
        decoded = decode_spans(record)
        spans += len(decoded)
        ingest.take(decoded, index, 0.0)
    traces = sum(isinstance(effect, Publish) for effect in ingest.tick(1.0))
    cpu = time.process_time() - started
    assert traces == runs, f"{traces} traces from {runs} runs"
    return {"records": len(records), "spans": spans, "traces": traces, "cpu_s": round(cpu, 3),
            "spans_per_s": round(spans / cpu), "traces_per_s": round(traces / cpu),
            "us_per_span": round(cpu / spans * 1e6, 1), "bytes_per_span": round(sum(map(len, records)) / spans)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--spans-per-record", type=int, default=50)
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args()
    exporter = InMemorySpanExporter()
    provider = tracer_provider(exporter)
    for run in train_traces(build_suite(seed=7), args.runs, playbook_ids=("bench",), run_seed=1, agents=20):
        run_agent(provider, run, used_entries=("e1", "e2"))
    spans = exporter.get_finished_spans()
    step = args.spans_per_record
    requests = [export_request(spans[i:i + step]) for i in range(0, len(spans), step)]
    results = {}
    print(f"{args.runs} runs, {len(spans)} spans, records of {step} spans")
    print(f"{'encoding':<11} {'records':>8} {'spans/s':>9} {'traces/s':>9} {'us/span':>8} {'bytes/span':>10}")
    for encoding in ("otlp_proto", "otlp_json"):
        figures = measure([encode_request(r, encoding) for r in requests], args.runs)  # type: ignore[arg-type]
        results[encoding] = figures
        print(f"{encoding:<11} {figures['records']:>8} {figures['spans_per_s']:>9} {figures['traces_per_s']:>9} "
              f"{figures['us_per_span']:>8} {figures['bytes_per_span']:>10}")
    write_results(args.out / "otlp_ingest.json", {"machine": machine(), "runs": args.runs,
                                                  "spans_per_record": step, "results": results})


if __name__ == "__main__":
    main()
