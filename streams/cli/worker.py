"""``combee worker``: run all stages or a subset, optionally with health and metrics endpoints."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import sys
import threading

from combee_core.settings import CombeeSettings
from combee_core.topology import STAGES
from streams.cli.flags import PIPELINE_FLAGS, add_common, add_loss_grace, add_pipeline, flag_overrides
from streams.cli.running import broker_for, stop_on_signals, until_stopped

WORKER_FLAGS = ("health_host", "builtin_evaluator_playbooks")
"""Worker flags named after the setting they override."""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    worker = subparsers.add_parser("worker", help="run all stages or a subset")
    add_common(worker)
    add_pipeline(worker)
    conditions = "; ".join(f"{stage.name} {stage.runs_when.said}" for stage in STAGES if stage.runs_when.said)
    worker.add_argument("--stages", help=f"comma-separated: {','.join(stage.name for stage in STAGES)} "
                        f"(default all; {conditions})")
    worker.add_argument("--health-port", type=int,
                        help="serve /healthz, /readyz and Prometheus /metrics on this port (0: a free one); "
                        "docs/operations.md")
    worker.add_argument("--health-host", dest="health_host",
                        help="address the health port binds (env COMBEE_HEALTH_HOST; default 127.0.0.1, this machine "
                        "only; 0.0.0.0 in a container, as deploy/ sets)")
    worker.add_argument("--builtin-evaluator-playbooks", dest="builtin_evaluator_playbooks",
                        help="playbooks the built-in evaluator scores on the synthetic task suite (comma-separated, "
                        "'*' for all; default: the demo's); it refuses the others (docs/protocol.md, evaluators)")
    add_loss_grace(worker)
    worker.set_defaults(handler=cmd_worker)


async def cmd_worker(args: argparse.Namespace) -> int:
    settings = CombeeSettings.load(**flag_overrides(args, (*PIPELINE_FLAGS, *WORKER_FLAGS)))
    from streams.topology.llm_setup import LLM_LAYER, calls_a_provider  # the topology: only when a worker runs

    if calls_a_provider(settings):  # start importing litellm (seconds) now, while the broker is found
        threading.Thread(target=importlib.import_module, args=(LLM_LAYER,), daemon=True, name="import-litellm").start()
    stop = asyncio.Event()
    stop_on_signals(stop)
    async with contextlib.AsyncExitStack() as exits:
        from streams.topology.health import WorkerReadiness, announce_ready

        readiness, metrics = WorkerReadiness(), None
        if args.health_port is not None:  # first, so that liveness answers while the LLM layer imports
            from combee_core.serve.doors import DoorPolicy
            from streams.topology.health import HealthServer
            from streams.topology.metrics import WorkerMetrics

            metrics = WorkerMetrics(readiness)
            health = await exits.enter_async_context(
                HealthServer(readiness.report, host=settings.health_host, port=args.health_port,
                             metrics=metrics.render, policy=DoorPolicy.for_bind(
                                 settings.health_host, settings.allowed_hosts, door="the worker's health port")))
            print(f"worker: health on :{health.port} (/healthz, /readyz, /metrics; bound to {settings.health_host})",
                  file=sys.stderr)
        from streams.topology.worker import STOP_BUDGET_S, parse_stages, run_worker

        stages = parse_stages(args.stages)
        bootstrap, profile = await exits.enter_async_context(
            broker_for(settings, embedded=args.embedded, offer_embedded=True))
        for line in start_lines(settings, stages, bootstrap):
            print(line, file=sys.stderr)
        work = run_worker(settings, bootstrap, profile, stages, stop=stop, readiness=readiness,
                          on_call=metrics.observe_call if metrics is not None else None)
        announcer = asyncio.create_task(announce_ready(readiness, stop, lambda line: print(line, file=sys.stderr,
                                                                                           flush=True)))
        exits.callback(announcer.cancel)
        counters = await until_stopped(work, stop, STOP_BUDGET_S + 0.5)  # e.g. a stop while creating the topics
    print(f"worker stopped: {describe_counters(counters) if counters is not None else 'cancelled while starting'}",
          file=sys.stderr)
    return 0


def start_lines(settings: CombeeSettings, stages: tuple[str, ...], bootstrap: str) -> list[str]:
    """What a worker says once at start: the stages it runs (and those it does not, and why), the model of each
    role, and, when a role is the offline simulator, what that means for traces from outside producers."""
    from combee_core.model_notice import describe_models, simulator_warning
    from combee_core.processors.evaluator import parse_playbooks
    from streams.topology.worker import LLM_STAGES, runnable

    running, skipped = runnable(stages, settings)
    why: dict[str, list[str]] = {}
    for name, said in skipped.items():
        why.setdefault(said, []).append(name)
    left_out = [f"not {', '.join(names)}: {'they run' if len(names) > 1 else 'it runs'} {said}"
                for said, names in why.items()]
    lines = [f"worker: stages {', '.join(running)} on {bootstrap}, topics {settings.topic_prefix}*"
             + (f" ({'; '.join(left_out)})" if left_out else "")]
    if LLM_STAGES.intersection(running) or "evaluate" in running:
        lines.append(f"worker: {describe_models(settings, evaluator='evaluate' in running)}")
    if LLM_STAGES.intersection(running) and (warning := simulator_warning(settings)):
        lines.append(f"worker: {warning}")
    if "evaluate" in running:
        allowed = parse_playbooks(settings.builtin_evaluator_playbooks)
        scope = "every playbook" if allowed is None else f"playbook(s) {', '.join(sorted(allowed)) or 'none'}"
        lines.append(f"worker: the built-in evaluator scores {scope} on the synthetic task suite and refuses the "
                     "others (COMBEE_BUILTIN_EVALUATOR_PLAYBOOKS; your own metric: docs/protocol.md, "
                     "'Writing an evaluator')")
    return lines


def describe_counters(counters: dict[str, int]) -> str:
    """``{"messages.reflect": 40, ...}`` -> ``messages.reflect 40, ...`` (sorted; 'nothing counted' when empty)."""
    return ", ".join(f"{name} {count}" for name, count in sorted(counters.items())) or "nothing counted"
