"""Where one worker's CPU goes: py-spy on a ``combee worker`` process during a burst of traces; and where
litellm's fixed cost per call goes.

    python -m bench.profile_worker [--traces 3000] [--rate 200] [--out bench/results/throughput_worker_profile.txt]
    python -m bench.profile_worker --without-litellm --out bench/results/throughput_worker_profile_without_litellm.txt
    python -m bench.profile_worker --litellm-floor [--calls 20000] [--out bench/results/litellm_floor_profile.txt]

Starts the same run as ``bench.throughput`` (fresh namespace, one worker with every stage, zero-latency simulator,
warm-up traces first), attaches ``py-spy record --gil`` (samples only the thread holding the GIL, i.e. CPU spent in
Python; needs py-spy installed and ptrace permission) to the worker, sends ``--traces`` traces in one burst, and
stops sampling once every trace is in a version. Each sample is counted once, in the first category whose code is
on its stack (order of ``CATEGORIES``), then the functions with the most samples (own and inclusive) are listed.
A sampling profiler: percentages of the worker's Python CPU, not of wall time; native code without a Python frame
above it (the GIL handover itself) shows as an empty stack.

``--without-litellm`` profiles ``bench.direct_worker`` instead (the same worker, its roles answering from the
simulator directly): where everything but litellm goes. ``--litellm-floor`` profiles, in a child process,
``--calls`` reflector calls through ``LLMRoles`` and
``litellm.acompletion`` to ``bench.throughput``'s instant provider (a custom provider answering at once with a fixed
text and its price, as the simulator does), 8 at a time, and splits the samples into litellm's phases
(``FLOOR_PHASES``, first match wins).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import start_broker
from bench.throughput import Run, cpu_s, many_traces
from streams.topology.produce import produce_traces

CATEGORIES: list[tuple[str, tuple[str, ...]]] = [
    ("simulator", ("combee_core/llm/simulator.py", "combee_core/llm/provider.py")),
    ("litellm (incl. its executor thread)", ("litellm/", "concurrent/futures/thread.py")),
    ("llm-calls record (CallRecord JSON + send)", ("record (streams/llm_setup.py",)),
    ("roles: prompts/parse/records", ("combee_core/llm/",)),
    ("reflector stage", ("stages/reflect.py",)),
    ("batcher stage", ("stages/batch.py",)),
    ("aggregator stage", ("stages/aggregate.py",)),
    ("reducer stage", ("stages/reduce.py",)),
    ("controller stage", ("stages/control.py",)),
    ("log views", ("playbook_view.py", "log_view.py")),
    ("aiokafka producer", ("aiokafka/producer",)),
    ("aiokafka consumer/fetch", ("aiokafka/consumer",)),
    ("aiokafka other", ("aiokafka/",)),
    ("runtime", ("streams/runtime.py",)),
]


FLOOR_PHASES: list[tuple[str, tuple[str, ...]]] = [
    ("the provider's answer (InstantProvider)", ("InstantProvider.",)),
    ("completion(): model info lookup (responses_api_bridge_check -> get_model_info)",
     ("responses_api_bridge_check", "get_model_info")),
    ("provider resolution (get_llm_provider, all calls)", ("get_llm_provider (get_llm_provider_logic",)),
    ("response metadata: response_cost, api_base, timing, headers (update_response_metadata)",
     ("update_response_metadata",)),
    ("completion(): get_optional_params and provider params", ("get_optional_params", "add_provider_specific_params",
                                                               "pre_process_non_default_params")),
    ("completion(): litellm_params and the logging object's update", ("get_litellm_params",
                                                                       "update_environment_variables")),
    ("function_setup (the logging object per call)", ("function_setup",)),
    ("post-call processing, deployment hooks, caching handler", ("post_call_processing", "deployment_hook",
                                                                 "LLMCachingHandler", "_cache")),
    ("completion(): the rest of its body (runs in the executor thread)", (";completion (litellm/main.py",)),
    ("thread hop: run_in_executor, the executor thread, future chaining",
     ("run_in_executor", "concurrent/futures", "_chain_future", "_copy_future_state", "call_soon_threadsafe",
      "_write_to_self", "_read_from_self", "wrap_future")),
    ("acompletion() and litellm's client wrapper, own work", ("litellm/",)),
    ("our roles: prompt, call key, parsing, CallRecord, Reflection", ("combee_core/",)),
]

FLOOR_SCRIPT = """
import asyncio, sys, time
from bench.llm_client_cost import INSTANT_PROVIDER, register_instant_provider
from bench.throughput import many_traces
from combee_core.llm.roles import LLMConfig, LLMRoles, RoleConfig
register_instant_provider()
roles = LLMRoles(LLMConfig(reflector=RoleConfig(model=INSTANT_PROVIDER + "/answer", max_retries=0)),
                 on_call=lambda record: record.model_dump_json())
calls = int(sys.argv[1])
traces = many_traces(1000, seed=2)
async def run(count):
    for start in range(0, count, 8):
        await asyncio.gather(*(roles.reflect(traces[(start + i) % len(traces)]) for i in range(8)))
asyncio.run(run(400))  # lazy imports, first calls
started = time.process_time()
asyncio.run(run(calls))
print("ms_per_call", 1000 * (time.process_time() - started) / calls)
"""


def profile_litellm_floor(calls: int, rate_hz: int, raw: Path) -> tuple[str, float]:
    """Profile of ``calls`` instant calls through litellm (child process), by phase; and the CPU ms per call."""
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    done = subprocess.run([py_spy, "record", "--gil", "-r", str(rate_hz), "-f", "raw", "-o", str(raw), "--",
                           sys.executable, "-c", FLOOR_SCRIPT, str(calls)], capture_output=True, text=True,
                          check=True)
    ms_per_call = float(next(line.split()[1] for line in done.stdout.splitlines() if line.startswith("ms_per_call")))
    phases: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        if not line.strip():
            continue
        stack, count_text = line.rsplit(" ", 1)
        if "_find_and_load" in stack or ("<string>:15" not in stack and "Thread._bootstrap" not in stack):
            continue  # imports and set-up; keep the measured loop (line 15 of FLOOR_SCRIPT) and the executor
        count = int(count_text)
        total += count
        phases[next((name for name, marks in FLOOR_PHASES if any(m in stack for m in marks)),
                    "asyncio loop / other")] += count
    total = max(total, 1)
    lines = [f"{total} samples in the measured loop", ""]
    lines += [f"{100 * n / total:5.1f}% {name}" for name, n in phases.most_common()]
    return "\n".join(lines) + "\n", ms_per_call


def categorise(raw: Path, top: int = 40) -> str:
    """The report for a py-spy ``raw`` (collapsed stacks) file."""
    categories: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        if not line.strip():
            continue
        stack, count_text = line.rsplit(" ", 1)
        count = int(count_text)
        frames = stack.split(";")
        total += count
        own[frames[-1] or "(no Python frame)"] += count
        for frame in set(frames):
            inclusive[frame] += count
        name = next((name for name, marks in CATEGORIES if any(m in stack for m in marks)),
                    "asyncio loop / other")
        categories[name] += count
    total = max(total, 1)
    lines = [f"{total} samples", ""]
    lines += [f"{100 * n / total:5.1f}% {name}" for name, n in categories.most_common()]
    lines += ["", f"functions by own samples (top {top}):"]
    lines += [f"{100 * n / total:5.1f}% {frame}" for frame, n in own.most_common(top)]
    lines += ["", f"functions by inclusive samples (top {top}):"]
    lines += [f"{100 * n / total:5.1f}% {frame}" for frame, n in inclusive.most_common(top)]
    return "\n".join(lines) + "\n"


async def profile(count: int, rate_hz: int, raw: Path, without_litellm: bool = False) -> dict[str, float]:
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    traces = many_traces(count)
    broker = start_broker()
    try:
        async with Run(broker, 1, without_litellm) as run:
            pid = run.procs[0].pid
            spy = subprocess.Popen([py_spy, "record", "--gil", "-r", str(rate_hz), "-f", "raw", "-o", str(raw),
                                    "--pid", str(pid)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            await asyncio.sleep(1.0)  # py-spy attaches
            cpu_before, started = cpu_s(pid), time.monotonic()
            await produce_traces(run.settings, broker.bootstrap, broker.profile, traces)
            assert run.follower is not None
            await run.follower.wait_incorporated({t.trace_id for t in traces}, 900, f"{count} traces")
            cpu, elapsed = cpu_s(pid) - cpu_before, time.monotonic() - started
            spy.send_signal(signal.SIGINT)
            _, err = spy.communicate(timeout=60)
            if not raw.exists():
                raise RuntimeError(f"py-spy wrote nothing: {err.decode(errors='replace')[-500:]}")
    finally:
        broker.stop()
    return {"traces": count, "worker_cpu_ms_per_trace": 1000 * cpu / count, "traces_per_s": count / elapsed}


DIRECT_NOTE = "; bench.direct_worker: its roles answer from the simulator directly, not through litellm"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", type=int, default=3000)
    parser.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    parser.add_argument("--commit", default="", help="commit the profiled code is at (for the header)")
    parser.add_argument("--out", type=Path, default=Path("bench/results/throughput_worker_profile.txt"))
    parser.add_argument("--raw", type=Path, default=None, help="also keep py-spy's collapsed stacks here")
    parser.add_argument("--litellm-floor", action="store_true", help="profile litellm's fixed cost per call instead")
    parser.add_argument("--calls", type=int, default=20000, help="calls of the --litellm-floor profile")
    parser.add_argument("--without-litellm", action="store_true",
                        help="profile bench.direct_worker (roles answer from the simulator directly) instead")
    args = parser.parse_args(argv)
    if args.litellm_floor:
        out = args.out if args.out != parser.get_default("out") else Path("bench/results/litellm_floor_profile.txt")
        with tempfile.TemporaryDirectory() as tmp:
            report, ms_per_call = profile_litellm_floor(args.calls, args.rate, Path(tmp) / "floor.raw")
        header = (
            f"Where litellm's fixed cost per call goes: py-spy record --gil -r {args.rate} on {args.calls:,} reflector "
            "calls through LLMRoles and litellm.acompletion to an instant provider (bench.throughput's "
            "InstantProvider: answers at once with a fixed text and its price), 8 in flight, no litellm callback; "
            f"python -m bench.profile_worker --litellm-floor{', code at ' + args.commit if args.commit else ''}. "
            f"Under py-spy: {ms_per_call:.3f} ms CPU per call (sampling slows it); load average "
            f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs. Each sample counted once, in the first phase whose "
            "code is on its stack (FLOOR_PHASES, in that order).\n\n"
        )
        out.write_text(header + report)
        print(header + report)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "worker.raw"
        figures = asyncio.run(profile(args.traces, args.rate, raw, args.without_litellm))
        report = categorise(raw)
        if args.raw is not None:
            shutil.copyfile(raw, args.raw)
    header = (
        f"Where one worker's CPU goes: py-spy record --gil -r {args.rate} -f raw on a 'combee worker' process (all "
        f"stages{DIRECT_NOTE if args.without_litellm else ''}) "
        f"during a {args.traces:,}-trace burst after bench.throughput's warm-up, zero-latency simulator, "
        f"embedded Tansu{', code at ' + args.commit if args.commit else ''}; python -m bench.profile_worker. Each "
        "sample is counted once, in the first category whose code is on its stack (bench/profile_worker.py's "
        "CATEGORIES, in that order). The sampled run (py-spy slows the worker a little): "
        f"{figures['traces_per_s']:.0f} traces/s, worker CPU {figures['worker_cpu_ms_per_trace']:.2f} ms/trace; "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs.\n\n"
    )
    args.out.write_text(header + report)
    print(header + report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
