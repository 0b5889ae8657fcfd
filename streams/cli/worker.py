"""``combee worker``: run all stages or a subset, optionally with health and metrics endpoints and the OTLP/HTTP
receiver (``--otlp``)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import sys
import threading

from combee_core.settings import CombeeSettings, SettingsError
from combee_core.topology import STAGES
from streams.cli.flags import (
    OTLP_FLAGS,
    PIPELINE_FLAGS,
    add_common,
    add_door,
    add_loss_grace,
    add_otlp,
    add_pipeline,
    flag_overrides,
)
from streams.cli.running import broker_for, stop_on_signals, until_stopped

WORKER_FLAGS = ("health_host", "builtin_evaluator_playbooks", "http_tls_cert", "http_tls_key", "access_keys_file")
"""Worker flags named after the setting they override."""


class NoStageToRun(SettingsError):
    """Every stage asked for is off under the settings: the worker would idle (the message says what each needs)."""


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
    add_otlp(worker)
    add_door(worker)
    worker.set_defaults(handler=cmd_worker)


def worker_plan(args: argparse.Namespace) -> tuple[CombeeSettings, tuple[str, ...]]:
    """The worker's settings (environment, then flags) and stages. ``--otlp`` turns ingest on (no variable needed);
    :class:`NoStageToRun` when no stage asked for would run (``--stages`` names candidates, each run only when its
    condition holds: the deploy files list the optional stages so)."""
    from streams.topology.worker import parse_stages, runnable

    stages = parse_stages(args.stages)
    overrides = flag_overrides(args, (*PIPELINE_FLAGS, *WORKER_FLAGS, *OTLP_FLAGS))
    if args.otlp:
        overrides["otlp_ingest"] = True
    settings = CombeeSettings.load(**overrides)
    running, skipped = runnable(stages, settings)
    if not running:
        raise NoStageToRun("no stage to run: " + "; ".join(f"{name} runs {said}" for name, said in skipped.items()))
    return settings, stages


async def cmd_worker(args: argparse.Namespace) -> int:
    settings, stages = worker_plan(args)
    from streams.topology.llm_setup import LLM_LAYER, calls_a_provider  # the topology: only when a worker runs
    from streams.topology.worker import STOP_BUDGET_S, run_worker

    if args.otlp == "http":
        from streams.ingest.otlp_receiver import check_receiver_bind, receiver_keys

        check_receiver_bind(settings.otlp_receiver_host, receiver_keys(settings))  # before finding the broker

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
        bootstrap, profile = await exits.enter_async_context(
            broker_for(settings, embedded=args.embedded, offer_embedded=True))
        for line in start_lines(settings, stages, bootstrap):
            print(line, file=sys.stderr)
        work = run_worker(settings, bootstrap, profile, stages, stop=stop, readiness=readiness,
                          on_call=metrics.observe_call if metrics is not None else None)
        announcer = asyncio.create_task(announce_ready(readiness, stop, lambda line: print(line, file=sys.stderr,
                                                                                           flush=True)))
        exits.callback(announcer.cancel)
        receiver = asyncio.create_task(serve_otlp(settings, bootstrap, profile, stop)) if args.otlp == "http" else None
        counters = await until_stopped(work, stop, STOP_BUDGET_S + 0.5)  # e.g. a stop while creating the topics
        if receiver is not None:
            stop.set()
            await receiver  # its error (the port taken ...) is the command's, in one line
    print(f"worker stopped: {describe_counters(counters) if counters is not None else 'cancelled while starting'}",
          file=sys.stderr)
    return 0


async def serve_otlp(settings: CombeeSettings, bootstrap: str, profile, stop: asyncio.Event) -> None:
    """The OTLP/HTTP receiver in the worker's process, with the worker's settings (so it watches this run's
    ingest-otlp group); stops the worker when it cannot serve."""
    from streams.ingest.otlp_receiver import serve_receiver

    try:
        counters = await serve_receiver(settings, bootstrap, profile, stop, on_ready=lambda receiver: print(
            f"worker: OTLP/HTTP receiver on {receiver.url} -> topic {settings.otlp_topic}", file=sys.stderr,
            flush=True))
    except BaseException:
        stop.set()
        raise
    print(f"otlp-receiver stopped: {describe_counters(counters)}", file=sys.stderr)


def start_lines(settings: CombeeSettings, stages: tuple[str, ...], bootstrap: str) -> list[str]:
    """What a worker says once at start: the stages it runs (and those it does not, and why), the model of each
    role, and, when a role is the offline simulator, what that means for traces from outside producers."""
    from combee_core.evaluate.processor import parse_playbooks
    from combee_core.model_notice import describe_models, simulator_warning
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
