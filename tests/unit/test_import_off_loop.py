"""The LLM layer's slow import runs off the event loop, and a stop during it does not wait for it."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import time

import pytest

from streams.topology.llm_setup import import_off_loop


def test_a_stop_during_a_slow_import_exits_without_waiting_for_it(tmp_path):
    (tmp_path / "slow_to_import.py").write_text("import time\ntime.sleep(30)\n")
    script = textwrap.dedent(f"""
        import asyncio, sys
        sys.path.insert(0, {str(tmp_path)!r})
        from streams.topology.llm_setup import import_off_loop

        async def main():
            task = asyncio.create_task(import_off_loop("slow_to_import"))
            ticks = 0
            while ticks < 5:  # the loop keeps going while the module imports
                await asyncio.sleep(0.05)
                ticks += 1
            task.cancel()  # a SIGTERM: the worker stops waiting

        asyncio.run(main())
        print("stopped")
    """)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    took = time.monotonic() - started
    assert done.returncode == 0 and "stopped" in done.stdout, done.stderr
    assert took < 20, took  # the import sleeps 30 s: asyncio.run's executor join would wait for all of it


async def test_an_import_error_reaches_the_awaiting_task():
    with pytest.raises(ModuleNotFoundError, match="no_such_module_anywhere"):
        await asyncio.wait_for(import_off_loop("no_such_module_anywhere"), 30)
