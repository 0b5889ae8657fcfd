"""``combee worker``: run all stages or a subset, optionally with health and metrics endpoints."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import sys
import threading

from combee_core.topology import STAGES
from streams.cli.flags import add_common, add_loss_grace, add_pipeline, settings_from_args
from streams.cli.running import broker_for, stop_on_signals, until_stopped


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    worker = subparsers.add_parser("worker", help="run all stages or a subset")
    add_common(worker)
    add_pipeline(worker)
    promotion_only = " and ".join(stage.name for stage in STAGES if stage.promotion_only)
    worker.add_argument("--stages", help=f"comma-separated: {','.join(stage.name for stage in STAGES)} "
                        f"(default all; {promotion_only} only with --promotion)")
    worker.add_argument("--health-port", type=int,
                        help="serve /healthz, /readyz and Prometheus /metrics on this port (0: a free one); "
                        "docs/operations.md")
    add_loss_grace(worker)
    worker.set_defaults(handler=cmd_worker)


async def cmd_worker(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    if settings.llm_record != "replay":  # start importing litellm (seconds) now, while the broker is found
        threading.Thread(target=importlib.import_module, args=("combee_core.llm.provider",), daemon=True,
                         name="import-litellm").start()
    stop = asyncio.Event()
    stop_on_signals(stop)
    async with contextlib.AsyncExitStack() as exits:
        from streams.topology.health import WorkerReadiness, announce_ready

        readiness, metrics = WorkerReadiness(), None
        if args.health_port is not None:  # first, so that liveness answers while the LLM layer imports
            from streams.topology.health import HealthServer
            from streams.topology.metrics import WorkerMetrics

            metrics = WorkerMetrics(readiness)
            health = await exits.enter_async_context(
                HealthServer(readiness.report, port=args.health_port, metrics=metrics.render))
            print(f"worker: health on :{health.port} (/healthz, /readyz, /metrics)", file=sys.stderr)
        from streams.topology.worker import STOP_BUDGET_S, parse_stages, run_worker

        stages = parse_stages(args.stages)
        bootstrap, profile = await exits.enter_async_context(broker_for(settings, embedded=args.embedded))
        print(f"worker: stages {', '.join(stages)} on {bootstrap}, topics {settings.topic_prefix}*", file=sys.stderr)
        work = run_worker(settings, bootstrap, profile, stages, stop=stop, readiness=readiness,
                          on_call=metrics.observe_call if metrics is not None else None)
        announcer = asyncio.create_task(announce_ready(readiness, stop, lambda line: print(line, file=sys.stderr,
                                                                                           flush=True)))
        exits.callback(announcer.cancel)
        counters = await until_stopped(work, stop, STOP_BUDGET_S + 0.5)  # e.g. a stop while creating the topics
    print(f"worker stopped: {counters if counters is not None else 'cancelled while starting'}", file=sys.stderr)
    return 0
