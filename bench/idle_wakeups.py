"""How often an idle worker wakes: an in-process pipeline (every stage) on the embedded Tansu, 8 playbooks learned,
then ``--idle-s`` of silence, counting its consumers' ``getmany`` returns, its fetch requests and the partition
computations of its stages, and this process's CPU (the worker is all of it but the counting), per 30 s.

    python -m bench.idle_wakeups [--idle-s 20] [--no-count]

``--no-count`` measures the CPU without the counting wrappers. ``bench.idle_fetch`` measures a ``combee worker``
process and its broker from outside; this one says where the wake-ups come from.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gc
import time
import uuid
from typing import Any

import aiokafka.consumer.consumer as aiokafka_consumer
import aiokafka.consumer.fetcher as aiokafka_fetcher

import streams.topology.runtime as runtime
from bench.common import start_broker
from combee_core.settings import CombeeSettings
from combee_core.sim.task_suite import build_suite, train_traces
from streams.topology.pipeline import InProcessPipeline
from streams.topology.produce import produce_traces

COUNTS: collections.Counter[str] = collections.Counter()


def count_calls() -> None:
    """Count getmany returns, fetch requests and partition computations (wrapping the library functions)."""
    getmany, fetch, partition_for = (aiokafka_consumer.AIOKafkaConsumer.getmany,
                                     aiokafka_fetcher.Fetcher._proc_fetch_request, runtime.partition_for)

    async def counted_getmany(self: Any, *args: Any, **kwargs: Any) -> Any:
        COUNTS["getmany"] += 1
        return await getmany(self, *args, **kwargs)

    async def counted_fetch(self: Any, *args: Any, **kwargs: Any) -> Any:
        COUNTS["fetch requests"] += 1
        return await fetch(self, *args, **kwargs)

    def counted_partition_for(key: str, count: int) -> int:
        COUNTS["partition_for"] += 1
        return partition_for(key, count)

    aiokafka_consumer.AIOKafkaConsumer.getmany = counted_getmany  # type: ignore[method-assign]
    aiokafka_fetcher.Fetcher._proc_fetch_request = counted_fetch  # type: ignore[method-assign]
    runtime.partition_for = counted_partition_for


async def measure(idle_s: float) -> dict[str, float]:
    broker = start_broker()
    try:
        settings = CombeeSettings.load(env={}, topic_prefix=f"iw{uuid.uuid4().hex[:8]}.", sim_clock="virtual",
                                       partitions=2, batch_size=20, max_wait_s=1.0)
        traces = train_traces(build_suite(seed=7), 160, playbook_ids=[f"pb{i}" for i in range(8)], run_seed=1)
        async with InProcessPipeline(settings, broker.bootstrap, broker.profile) as run:
            await produce_traces(settings, broker.bootstrap, broker.profile, traces)
            await run.wait_for(lambda vs: len({v.playbook_id for v in vs}) >= 8, timeout_s=300)
            await asyncio.sleep(5.0)  # the last hops settle, every consumer backs off
            COUNTS.clear()
            cpu, started = time.process_time(), time.monotonic()
            await asyncio.sleep(idle_s)
            per_30 = 30 / (time.monotonic() - started)
            result = {"cpu_s": (time.process_time() - cpu) * per_30, **{k: v * per_30 for k, v in COUNTS.items()}}
            waits = collections.Counter(  # the fetch wait of each consumer that fetches (has partitions)
                consumer._fetcher._fetch_max_wait_ms for consumer in gc.get_objects()
                if isinstance(consumer, aiokafka_consumer.AIOKafkaConsumer) and not consumer._closed
                and consumer._fetcher is not None and consumer.assignment())
            print(f"fetch waits (ms) of the consumers with partitions at the end: {dict(sorted(waits.items()))}")
            return result
    finally:
        broker.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle-s", type=float, default=20.0)
    parser.add_argument("--no-count", action="store_true")
    args = parser.parse_args(argv)
    if not args.no_count:
        count_calls()
    result = asyncio.run(measure(args.idle_s))
    print("per 30 s idle: " + ", ".join(f"{k} {v:.2f}" if k == "cpu_s" else f"{k} {v:.0f}"
                                        for k, v in result.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
