"""What a running command needs: the broker it uses, a stop on SIGINT/SIGTERM, and a bounded wait for its work to
stop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import AsyncIterator, Awaitable
from typing import TypeVar

from combee_core.connection import PLAINTEXT, refuse_unused
from combee_core.settings import CombeeSettings
from streams.broker.profile import BrokerProfile
from streams.broker.state import BrokerRecord

log = logging.getLogger("combee")
T = TypeVar("T")


NO_BROKER_HELP = ("no broker: pass --bootstrap HOST:PORT (or set COMBEE_KAFKA_BOOTSTRAP), or start one with "
                  "`combee broker` in another terminal (commands on this machine then find it), or pass --embedded "
                  "for a throwaway in-memory broker that stops with this command")
"""What a command that can run on a throwaway broker (``worker``, ``replay``) says when it finds none."""


def no_broker_help(*, offer_embedded: bool, gone: BrokerRecord | None = None) -> str:
    """Why there is no broker and the ways out: ``--embedded`` only where a throwaway broker is of use (not for a
    command that reads or acts on a run's topics); ``gone``: the recorded `combee broker` that no longer runs."""
    if offer_embedded and gone is None:
        return NO_BROKER_HELP
    if gone is not None:
        lost = "" if gone.storage.startswith("s3://") else ", its topics held in memory are gone"
        why = (f"no broker: the `combee broker` recorded at {gone.bootstrap} (pid {gone.pid}, storage {gone.storage}) "
               f"is no longer running{lost}; start it again with `combee broker`, or pass --bootstrap HOST:PORT")
    else:
        why = ("no broker: pass --bootstrap HOST:PORT (or set COMBEE_KAFKA_BOOTSTRAP), or start one with "
               "`combee broker` in another terminal (commands on this machine then find it)")
    return why + (", or pass --embedded for a throwaway in-memory broker" if offer_embedded else "")


@contextlib.asynccontextmanager
async def broker_for(settings: CombeeSettings, *, embedded: bool = False,
                     offer_embedded: bool = False) -> AsyncIterator[tuple[str, BrokerProfile]]:
    """Yield (bootstrap, profile): the configured broker (reached through the ``kafka`` connection settings, which
    the profile carries to every client); else, with ``embedded``, a throwaway Tansu started for this command; else
    the broker a running ``combee broker`` recorded. None of these: :class:`NoBrokerFound` (suggesting
    ``--embedded`` when ``offer_embedded``). A broker that does not answer within ``broker_connect_timeout_s``:
    :class:`BrokerUnreachable`."""
    from streams.broker.errors import NoBrokerFound
    from streams.broker.handshake import check_broker
    from streams.broker.profile import profile_for
    from streams.broker.state import read_record, recorded_but_gone
    from streams.broker.tansu import EmbeddedBroker

    bootstrap = settings.kafka_bootstrap
    connection = settings.kafka if bootstrap else PLAINTEXT  # a broker this machine runs is plaintext on loopback
    if not bootstrap and not embedded:
        gone = recorded_but_gone()
        record = read_record()
        if record is None:
            raise NoBrokerFound(no_broker_help(offer_embedded=offer_embedded, gone=gone))
        refuse_unused(settings.kafka, f"the local `combee broker` at {record.bootstrap}")
        bootstrap = record.bootstrap
        print(f"Using the broker at {bootstrap} (`combee broker`, pid {record.pid}, storage {record.storage}).",
              file=sys.stderr)
    if bootstrap:
        await check_broker(bootstrap, timeout_s=settings.broker_connect_timeout_s, connection=connection)
        profile = await profile_for(bootstrap, settings.broker_kind, connection)
        yield bootstrap, profile.with_idle_fetch_wait(settings.tansu_idle_fetch_wait_ms)
        return
    refuse_unused(settings.kafka, "the throwaway embedded broker (--embedded)")
    broker = EmbeddedBroker()
    await broker.start_async()  # spawned from the event loop's thread: the broker dies with this process
    print(f"Started a throwaway embedded broker (Tansu) at {broker.bootstrap}. Its data lives in memory only, for as "
          f"long as this command runs.", file=sys.stderr)
    try:
        yield broker.bootstrap, BrokerProfile.for_tansu().with_idle_fetch_wait(settings.tansu_idle_fetch_wait_ms)
    finally:
        await asyncio.to_thread(broker.stop)


def stop_on_signals(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)


async def until_stopped(work: Awaitable[T], stop: asyncio.Event, budget_s: float) -> T | None:
    """Await ``work``; once ``stop`` is set, give it ``budget_s`` more, then cancel it and return None."""
    task = asyncio.ensure_future(work)
    stopper = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait([task, stopper], return_when=asyncio.FIRST_COMPLETED)
        if not task.done():
            await asyncio.wait([task], timeout=budget_s)
    finally:
        stopper.cancel()
    if not task.done():
        log.warning("did not stop within %.1f s of the stop request; cancelled", budget_s)
        task.cancel()
        await asyncio.wait([task], timeout=1.0)
        return None
    return task.result()
