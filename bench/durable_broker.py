"""What the durable `combee broker` costs against the in-memory one, and its fsync (the default) against
``--no-fsync``: produce latency (one acknowledged record at a time) and throughput (pipelined), start and restart
times, the memory of the storage and broker processes, and the disk a record takes. Prints a table and writes
``bench/results/durable_broker.json``.

    python -m bench.durable_broker            # --records 2000 --size 1024 --latency-records 300
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from aiokafka import AIOKafkaProducer

from combee_core.connection import KafkaConnection
from streams.broker.admin import create_topics
from streams.broker.connection import client_kwargs
from streams.broker.durable import DurableBroker
from streams.broker.seaweed import directory_bytes
from streams.broker.tansu import EmbeddedBroker

RESULTS = Path(__file__).parent / "results" / "durable_broker.json"


def rss_mb(pid: int | None) -> float | None:
    """Resident memory of a process, MB (None when unknown)."""
    if pid is None:
        return None
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


async def produce_figures(bootstrap: str, records: int, size: int, latency_records: int) -> dict[str, float]:
    topic = f"bench.durable.{time.time_ns()}"
    connection = KafkaConnection()  # the embedded broker: plaintext on loopback
    await create_topics(bootstrap, {topic: 1}, connection=connection)
    value = os.urandom(size // 2).hex().encode()[:size]
    producer = AIOKafkaProducer(**client_kwargs(bootstrap, connection), acks=-1, linger_ms=0)
    await producer.start()
    try:
        latencies = []
        for _ in range(latency_records):
            started = time.perf_counter()
            await (await producer.send(topic, value))
            latencies.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        sends = [await producer.send(topic, value) for _ in range(records)]
        await asyncio.gather(*sends)
        took = time.perf_counter() - started
    finally:
        await producer.stop()
    latencies.sort()
    return {"produce_p50_ms": statistics.median(latencies), "produce_p99_ms": latencies[int(0.99 * len(latencies))],
            "throughput_records_per_s": records / took, "throughput_mb_per_s": records * size / took / 1e6,
            "records_written": records + latency_records}


async def durable(args: argparse.Namespace, fsync: bool = True) -> dict[str, float | None]:
    with tempfile.TemporaryDirectory(prefix="combee-bench-durable-") as state:
        broker = DurableBroker(Path(state), fsync=fsync)
        await broker.start()
        assert broker.storage is not None and broker.tansu is not None
        cold = broker.start_seconds
        figures: dict[str, float | None] = {"start_s": cold, "storage_start_s": broker.storage.startup_seconds}
        figures["storage_rss_idle_mb"] = rss_mb(broker.storage.pid)
        figures.update(await produce_figures(broker.bootstrap, args.records, args.size, args.latency_records))
        figures["storage_rss_mb"] = rss_mb(broker.storage.pid)
        figures["tansu_rss_mb"] = rss_mb(broker.tansu.pid)
        await broker.stop()
        disk = directory_bytes(broker.storage_dir)
        figures["disk_bytes_per_record"] = disk / float(figures["records_written"] or 1)
        disk_used = subprocess.run(["du", "-sk", str(broker.storage_dir)], capture_output=True, text=True)
        figures["disk_kb_du"] = float(disk_used.stdout.split()[0]) if disk_used.returncode == 0 else None
        again = DurableBroker(Path(state), fsync=fsync)
        await again.start()
        figures["restart_s"] = again.start_seconds
        await again.stop()
    return figures


async def memory(args: argparse.Namespace) -> dict[str, float | None]:
    broker = EmbeddedBroker()
    started = time.monotonic()
    await broker.start_async()
    figures: dict[str, float | None] = {"start_s": time.monotonic() - started}
    figures.update(await produce_figures(broker.bootstrap, args.records, args.size, args.latency_records))
    figures["tansu_rss_mb"] = rss_mb(broker.pid)
    await broker.stop_async()
    broker.cleanup()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--latency-records", type=int, default=300)
    args = parser.parse_args()
    results = {"memory": asyncio.run(memory(args)), "durable": asyncio.run(durable(args)),
               "durable_no_fsync": asyncio.run(durable(args, fsync=False)),
               "records": args.records, "size": args.size, "latency_records": args.latency_records,
               "machine": f"{platform.machine()} {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}",
               "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                        text=True).stdout.strip()}
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    kinds = ("memory", "durable", "durable_no_fsync")
    keys = sorted(set().union(*(results[kind] for kind in kinds)))
    print(f"{'figure':28} {'memory':>12} {'durable':>12} {'no fsync':>12}")
    for key in keys:
        row = [results[kind].get(key) for kind in kinds]
        print(f"{key:28} " + " ".join(f"{v:12.2f}" if isinstance(v, float | int) else f"{'-':>12}" for v in row))
    per_day = results["durable"]["disk_bytes_per_record"] * 20 * 86400 / 1e9
    print(f"disk a day at 20 records/s of {args.size} B (one topic, no retention): {per_day:.1f} GB")


if __name__ == "__main__":
    main()
