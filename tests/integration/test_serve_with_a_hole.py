"""``combee serve`` started on a log with a record still missing answers at once: each playbook is served its last
version before the hole, ``/healthz`` names the hole, and the versions behind it are served in order once it comes
(``streams/serving/served.py``).

The log is made as in ``test_late_records_on_broker.py`` (a durable broker whose ``playbook`` log holds versions 1
and 3, version 2's batch object taken out of the bucket: what a writer killed mid-produce leaves to a reader for up
to a minute). Before, ``combee serve`` answered only once no hole was open: a start waited for the hole to be read
or given up, at least ``HOLE_GIVE_UP_S`` (60 s) after it was seen.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time

import aiohttp
import pytest

from combee_core.serve.late_records import HOLE_GIVE_UP_S
from streams.serving.http import ServeHttp
from streams.serving.served import ServedPlaybooks
from tests.integration import test_late_records_on_broker as late_records
from tests.integration.test_late_records_on_broker import FOUND_S, PB, PROFILE, LateLog

late_log = late_records.late_log  # the fixture: a log whose version 2 is missing

pytestmark = [pytest.mark.integration]


def _served(served: ServedPlaybooks) -> int:
    version = served.served(PB)
    return version.version if version is not None else 0


async def _pending(client: aiohttp.ClientSession) -> list[dict[str, object]]:
    async with client.get("/healthz") as response:
        assert response.status == 200, await response.text()
        body = await response.json()
    assert body["status"] == "ok", body
    return body["pending"]


async def test_combee_serve_serves_the_last_version_before_a_missing_record_at_once_and_the_rest_in_order(
        late_log: LateLog, caplog) -> None:
    caplog.set_level(logging.INFO, logger="streams.serving.served")
    settings = late_log.settings.model_copy(update={"serve_port": 0})
    served = ServedPlaybooks(settings, late_log.broker.bootstrap, PROFILE)
    started = time.monotonic()
    # before, the start waited for the hole: given up HOLE_GIVE_UP_S after it was seen, or read when put back
    await asyncio.wait_for(served.__aenter__(), HOLE_GIVE_UP_S)
    try:
        print(f"answered {time.monotonic() - started:.1f} s after its start with offset 1 missing")
        hole = {"log": f"{late_log.topic}[0]", "offset": 1}
        assert _served(served) == 1, f"serving v{_served(served)} of a log whose v2 is missing"
        async with ServeHttp(settings, served) as http, aiohttp.ClientSession(http.url) as client:
            assert await _pending(client) == [hole]
            async with client.get(f"/playbooks/{PB}") as response:
                assert response.status == 200 and (await response.json())["version"] == 1
            late_log.put_back()
            assert await served.wait_until(lambda: _served(served) == 3, FOUND_S), (
                f"serving v{_served(served)} after v2 came")
            assert await _pending(client) == []
            await late_log.write(4)
            assert await served.wait_until(lambda: _served(served) == 4, FOUND_S)
    finally:
        await served.__aexit__(None, None, None)
    numbers = [int(n) for n in re.findall(rf"{PB}: serving v(\d+)", caplog.text)]
    assert numbers[0] == 1 and numbers[-1] == 4 and numbers == sorted(set(numbers)), numbers
    assert "offset 1 is not there yet" in caplog.text
