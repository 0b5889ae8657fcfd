"""The pause a loop takes between two looks at something: it ends early when the loop is asked to stop."""

from __future__ import annotations

import asyncio


async def stopped_within(stop: asyncio.Event, seconds: float) -> bool:
    """Wait until ``stop`` is set or ``seconds`` have passed, whichever comes first; True if ``stop`` is set (a poll
    loop then ends at once instead of after its interval)."""
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except TimeoutError:
        return stop.is_set()
    return True
