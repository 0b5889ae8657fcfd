"""Where ``combee broker`` records its address, so that other commands on this machine find it without --bootstrap.

The record is a small JSON file, ``broker.json``, in ``$COMBEE_STATE_DIR`` (default ``$XDG_STATE_HOME/combee``, or
``~/.local/state/combee``): the bootstrap address, the pid of the ``combee broker`` process, the storage URL and the
start time. A record whose process is no longer running is stale: readers ignore it and remove it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

log = logging.getLogger(__name__)

STATE_DIR_ENV = "COMBEE_STATE_DIR"
RECORD_NAME = "broker.json"


class BrokerRecord(BaseModel):
    """A running ``combee broker``: where it listens and which process owns it."""

    model_config = ConfigDict(frozen=True)

    bootstrap: str
    pid: int
    storage: str
    started_at: datetime
    data_dir: str | None = None
    """The durable broker's data directory (None: memory or an outside S3)."""
    storage_endpoint: str | None = None
    """The S3 endpoint of the storage process the durable broker runs (SeaweedFS)."""
    child_pids: dict[str, int] = {}
    """Process ids of its children: ``tansu``, and ``storage`` for the durable broker."""
    ports: dict[str, int] = {}
    """Every loopback port it listens on: ``kafka`` and the storage's."""

    @classmethod
    def now(cls, bootstrap: str, storage: str, pid: int | None = None, **details: object) -> BrokerRecord:
        return cls.model_validate({"bootstrap": bootstrap, "pid": os.getpid() if pid is None else pid,
                                   "storage": storage, "started_at": datetime.now(timezone.utc), **details})


def state_dir(env: Mapping[str, str] | None = None) -> Path:
    """``$COMBEE_STATE_DIR``, else ``$XDG_STATE_HOME/combee``, else ``~/.local/state/combee``."""
    env = os.environ if env is None else env
    if env.get(STATE_DIR_ENV):
        return Path(env[STATE_DIR_ENV])
    base = env.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "combee"


def record_path(env: Mapping[str, str] | None = None) -> Path:
    return state_dir(env) / RECORD_NAME


def process_alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie, killed but not yet reaped by its parent, counts as gone)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: it exists
    with contextlib.suppress(OSError, IndexError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rpartition(")")[2].split()[0] != "Z"
    return True


def write_record(record: BrokerRecord, path: Path | None = None) -> Path:
    """Write the record atomically (readers never see half a file); returns its path."""
    path = path or record_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".broker-", suffix=".json", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(record.model_dump_json(indent=1).encode() + b"\n")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


def read_record(path: Path | None = None) -> BrokerRecord | None:
    """The recorded broker if its ``combee broker`` process still runs; None otherwise (a stale record is removed)."""
    path = path or record_path()
    try:
        record = BrokerRecord.model_validate_json(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValidationError, ValueError) as error:
        log.warning("ignoring an unreadable broker record %s: %s", path, error)
        return None
    if not process_alive(record.pid):
        log.info("removing a stale broker record %s (pid %d is not running)", path, record.pid)
        _remove_if_owned(path, record.pid)
        return None
    return record


def recorded_but_gone(path: Path | None = None) -> BrokerRecord | None:
    """The record of a ``combee broker`` that no longer runs (left behind when it was killed), else None; the
    record is left in place (:func:`read_record` removes it)."""
    path = path or record_path()
    try:
        record = BrokerRecord.model_validate_json(path.read_bytes())
    except (OSError, ValidationError, ValueError):
        return None
    return None if process_alive(record.pid) else record


def clear_record(pid: int | None = None, path: Path | None = None) -> None:
    """Remove the record if it belongs to ``pid`` (default: this process); another broker's record stays."""
    _remove_if_owned(path or record_path(), os.getpid() if pid is None else pid)


def _remove_if_owned(path: Path, pid: int) -> None:
    with contextlib.suppress(FileNotFoundError, ValidationError, ValueError):
        if BrokerRecord.model_validate_json(path.read_bytes()).pid == pid:
            path.unlink()
