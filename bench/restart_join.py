"""What a restart costs in consumer-group joins: an in-process pipeline (every stage) started, stopped, and started
again in the same groups on the embedded Tansu, and the seconds until every stage owns its partitions.

    python -m bench.restart_join [--restarts 2] [--without-leave]

``--without-leave`` turns off ``streams.broker.group_leave`` (the behaviour before it: aiokafka sends no LeaveGroup
at Tansu's first generation, 0), so the old members stay in their groups until their session times out.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import time
import uuid

import streams.broker.gapless_consumer as gapless
from bench.common import start_broker
from combee_core.settings import CombeeSettings
from streams.topology.pipeline import InProcessPipeline
from streams.topology.worker import ALL_STAGES, runnable


async def owned_after(run: InProcessPipeline, stages: list[str], started: float, timeout_s: float = 120) -> float:
    """Seconds from ``started`` until every stage owns partitions of its input."""
    while not all(run.counters.get(f"partitions_acquired.{name}", 0) for name in stages):
        run.check_alive()
        if time.monotonic() - started > timeout_s:
            raise TimeoutError(f"not every stage owned partitions within {timeout_s} s")
        await asyncio.sleep(0.05)
    return time.monotonic() - started


async def measure(restarts: int) -> list[float]:
    broker = start_broker()
    try:
        settings = CombeeSettings.load(env={}, topic_prefix=f"rj{uuid.uuid4().hex[:8]}.", sim_clock="virtual",
                                       partitions=2)
        stages, _ = runnable(ALL_STAGES, settings)
        seconds = []
        for _ in range(restarts + 1):
            started = time.monotonic()
            async with InProcessPipeline(settings, broker.bootstrap, broker.profile, stages) as run:
                seconds.append(await owned_after(run, stages, started))
        return seconds
    finally:
        broker.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--restarts", type=int, default=2)
    parser.add_argument("--without-leave", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.without_leave:
        gapless.leave_on_stop = lambda consumer: None  # type: ignore[assignment]
    seconds = asyncio.run(measure(args.restarts))
    print(f"{'without' if args.without_leave else 'with'} the leave: every stage owned its partitions "
          f"{seconds[0]:.2f} s after a fresh start, after each restart "
          f"{', '.join(f'{s:.2f}' for s in seconds[1:])} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
