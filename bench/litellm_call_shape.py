"""Does the way we call litellm change its fixed cost? Paired A/B rounds of ``litellm.acompletion`` call shapes.

    python -m bench.litellm_call_shape [--rounds 16] [--calls 200] [--out bench/results/litellm_call_shape.json]

Every shape calls ``bench.throughput``'s instant provider (a litellm custom provider that answers at once with a fixed
text and its price, as the simulator does), 8 calls in flight, a fresh event loop per round. The shapes alternate
round by round (reversed every other round) and each is compared with ``base`` round by round (the median of the
paired differences), so a change of the machine's load during the run affects both sides of a pair alike:

- ``base``: what ``LLMRoles`` sends (model ``combee-instant/answer``, timeout, temperature, retries off), inside
  ``asyncio.wait_for``, with litellm's per-call logging payload skipped (``litellm_logging_skipped``);
- ``base_again``: the same, to show the noise of a pair;
- ``custom_llm_provider``: the bare model name with ``custom_llm_provider`` (``acompletion`` skips one of its three
  ``get_llm_provider`` calls);
- ``model_and_messages_only``: no timeout, temperature or retry switches;
- ``no_wait_for``: no ``asyncio.wait_for`` around the call (an upper bound for ``asyncio.timeout``);
- ``inline_executor``: the loop's default executor runs ``completion()`` inline instead of on a thread (an
  experiment on the thread hop, not a fix: it would run every ``run_in_executor(None)`` of a worker inline);
- ``with_logging_payload``: litellm builds its per-call logging payload (what ``litellm_logging_skipped`` saves).

CPU time of the process (``time.process_time``, all threads), in ms per call.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import write_results
from bench.llm_client_cost import INSTANT_PROVIDER, register_instant_provider

SHAPES = ["base", "base_again", "custom_llm_provider", "model_and_messages_only", "no_wait_for", "inline_executor",
          "with_logging_payload"]
MESSAGES = [{"role": "system", "content": "You reflect on an agent's trace. " * 20},
            {"role": "user", "content": "step " * 800}]


class InlineExecutor(concurrent.futures.ThreadPoolExecutor):
    """Runs each submitted function at once, in the caller's thread."""

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as error:  # handed to the awaiting caller, as a thread pool would
            future.set_exception(error)
        return future


def call_kwargs(shape: str) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"model": f"{INSTANT_PROVIDER}/answer", "messages": MESSAGES, "timeout": 120.0,
                              "temperature": 0.0, "num_retries": 0, "max_retries": 0}
    if shape == "custom_llm_provider":
        kwargs.update(model="answer", custom_llm_provider=INSTANT_PROVIDER)
    if shape == "model_and_messages_only":
        kwargs = {"model": kwargs["model"], "messages": MESSAGES}
    return kwargs


async def calls(shape: str, count: int, in_flight: int = 8) -> None:
    import litellm

    from combee_core.llm.provider import litellm_logging_skipped

    if shape == "inline_executor":
        asyncio.get_running_loop().set_default_executor(InlineExecutor())
    kwargs = call_kwargs(shape)

    async def one() -> object:
        if shape == "no_wait_for":
            return await litellm.acompletion(**kwargs)
        return await asyncio.wait_for(litellm.acompletion(**kwargs), 200)

    quiet = contextlib.nullcontext() if shape == "with_logging_payload" else litellm_logging_skipped()
    with quiet:
        for _ in range(count // in_flight):
            await asyncio.gather(*(one() for _ in range(in_flight)))


def measure(rounds: int, count: int) -> dict[str, Any]:
    register_instant_provider()
    for shape in SHAPES:
        asyncio.run(calls(shape, 80))  # lazy imports and first calls
    per_round: dict[str, list[float]] = {shape: [] for shape in SHAPES}
    for index in range(rounds):
        for shape in SHAPES if index % 2 == 0 else SHAPES[::-1]:
            started = time.process_time()
            asyncio.run(calls(shape, count))
            per_round[shape].append(1000 * (time.process_time() - started) / count)
    rows = {shape: {"median_ms": round(statistics.median(values), 3),
                    "paired_diff_vs_base_ms": round(statistics.median(
                        [a - b for a, b in zip(values, per_round["base"], strict=True)]), 3),
                    "per_round_ms": [round(v, 3) for v in values]}
            for shape, values in per_round.items()}
    return {"rounds": rounds, "calls_per_round": count, "shapes": rows,
            "load_average_after": [round(x, 2) for x in os.getloadavg()]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=16)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--out", type=Path, default=Path("bench/results/litellm_call_shape.json"))
    args = parser.parse_args(argv)
    result = measure(args.rounds, args.calls)
    print(f"{args.rounds} paired rounds of {args.calls} calls to an instant provider, 8 in flight; load average at the "
          f"end {result['load_average_after']} on {os.cpu_count()} CPUs")
    print(f"{'shape':<26} {'ms CPU per call':>16} {'vs base, paired':>16}")
    for shape, row in result["shapes"].items():
        print(f"{shape:<26} {row['median_ms']:>16.3f} {row['paired_diff_vs_base_ms']:>+16.3f}")
    write_results(args.out, result)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
