"""The durable broker's fsync decision, applied and in effect: with the default, SeaweedFS holds the per-path rule
that syncs every write under Tansu's bucket (read back from the filer), and the storage process calls ``fsync(2)``
on its volume file for each object written (seen with strace, not taken from the docs); with ``fsync=False`` the
rule is gone at the next start and no write is synced."""

from __future__ import annotations

import http.client
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from streams.broker.seaweed import BUCKET, SeaweedStorage, choose_ports, fsync_in_conf, read_filer_conf

pytestmark = [pytest.mark.integration]

WRITES = 5


def _put(port: int, key: str, body: bytes) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("PUT", f"/{BUCKET}/{key}", body=body)
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def _volume_fsyncs(storage: SeaweedStorage, trace_dir: Path, name: str) -> int:
    """``fsync``/``fdatasync`` calls on a volume data file (``*.dat``) while :data:`WRITES` objects are written."""
    assert storage.pid is not None
    out, err = trace_dir / f"{name}.strace", trace_dir / f"{name}.err"
    with open(err, "w") as err_file:
        tracer = subprocess.Popen(["strace", "-f", "-y", "-e", "trace=fsync,fdatasync", "-p", str(storage.pid),
                                   "-o", str(out)], stderr=err_file)
    try:
        deadline = time.monotonic() + 20
        while "attached" not in err.read_text():
            if tracer.poll() is not None or time.monotonic() > deadline:
                pytest.skip(f"strace could not attach here: {err.read_text().strip()[:200]}")
            time.sleep(0.1)
        for number in range(WRITES):
            assert _put(storage.ports["s3"], f"fsync-test/{name}-{number}", b"x" * 2048) == 200
    finally:
        tracer.terminate()
        tracer.wait(10)
    return len(re.findall(r"f(?:data)?sync\(\d+<[^>]*\.dat>", out.read_text()))


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace to see the storage's fsync calls")
def test_fsync_rule_is_applied_and_each_write_is_synced(tmp_path: Path) -> None:
    ports = choose_ports()
    storage = SeaweedStorage(tmp_path / "seaweedfs", ports).start()
    try:
        conf = read_filer_conf("127.0.0.1", ports["filer"])
        assert conf is not None and fsync_in_conf(conf), conf
        synced = _volume_fsyncs(storage, tmp_path, "on")
    finally:
        storage.stop()
    assert synced >= WRITES

    unsynced = SeaweedStorage(tmp_path / "seaweedfs", ports, fsync=False).start()
    try:
        conf = read_filer_conf("127.0.0.1", ports["filer"])
        assert conf is not None and not fsync_in_conf(conf), conf
        assert _volume_fsyncs(unsynced, tmp_path, "off") == 0
    finally:
        unsynced.stop()
