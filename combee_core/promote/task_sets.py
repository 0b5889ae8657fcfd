"""Held-out task sets as data (no Kafka): reading a JSONL file of tasks, the ``task-sets`` log read with its rule (the
first record of each (name, version) counts), the next version of a set, and which set each playbook is pinned to.

A task set is named and versioned; ``combee tasks add NAME FILE`` writes its next version when the tasks differ from
the latest. Evaluation results are cached by (content digest, ``name@version``, task id): a new version of a set is
evaluated afresh. The promoter scores every candidate of a playbook on
the set ``COMBEE_HELD_OUT_SETS`` pins it to (``playbook=NAME`` or ``playbook=NAME@VERSION``, ``*`` for every other
playbook; docs/operations.md, "Gating on your own tasks").
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

import orjson
from pydantic import ValidationError

from combee_core import limits
from combee_core.errors import CombeeError
from combee_core.log_order import ContiguousNumbers
from combee_core.models import HeldOutTask, TaskSetVersion, first_error, tasks_digest

EVERY_PLAYBOOK = "*"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class TaskSetError(CombeeError, ValueError):
    """A task file, a task set name or a pin that cannot be used (one line saying what and where)."""


def load_tasks(lines: Iterable[str], source: str = "tasks") -> list[HeldOutTask]:
    """The tasks of a JSONL file: one object per line with ``id`` (or ``task_id``), ``input``, and optionally
    ``expected``, ``rubric`` and ``metadata`` (string values); blank lines are skipped. Any bad line refuses the
    whole file (``TaskSetError`` naming the line), so a set is never registered with tasks missing."""
    tasks: list[HeldOutTask] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{source}, line {number}"
        try:
            raw = orjson.loads(line)
        except orjson.JSONDecodeError as error:
            raise TaskSetError(f"{where}: not JSON ({error})") from error
        if not isinstance(raw, dict):
            raise TaskSetError(f"{where}: expected a JSON object, got {type(raw).__name__}")
        if "id" in raw and "task_id" not in raw:
            raw["task_id"] = raw.pop("id")
        try:
            task = HeldOutTask.model_validate(raw)
        except ValidationError as error:
            raise TaskSetError(f"{where}: {first_error(error)}") from error
        if task.task_id in seen:
            raise TaskSetError(f"{where}: task id {task.task_id!r} is also on line {seen[task.task_id]}")
        seen[task.task_id] = number
        tasks.append(task)
    if not tasks:
        raise TaskSetError(f"{source}: no tasks (one JSON object per line: id, input, expected or rubric)")
    if len(tasks) > limits.MAX_TASKS_PER_SET:
        raise TaskSetError(f"{source}: {len(tasks)} tasks, more than the {limits.MAX_TASKS_PER_SET} a set holds")
    return tasks


def check_name(name: str) -> str:
    if not _NAME.match(name) or len(name) > limits.MAX_PLAYBOOK_ID_CHARS:
        raise TaskSetError(f"task set name {name!r}: use letters, digits, '.', '_' and '-' (at most "
                           f"{limits.MAX_PLAYBOOK_ID_CHARS} characters)")
    return name


def parse_ref(ref: str) -> tuple[str, int | None]:
    """``NAME`` -> (NAME, None: its latest version); ``NAME@3`` -> (NAME, 3)."""
    name, at, version = ref.strip().partition("@")
    check_name(name)
    if not at:
        return name, None
    if not version.isdigit() or int(version) < 1:
        raise TaskSetError(f"task set {ref!r}: the version after '@' is a number from 1")
    return name, int(version)


@dataclass
class TaskSetRegistry:
    """The ``task-sets`` log read in order: per name, its versions 1, 2, ... (the first record of each counts)."""

    gate: ContiguousNumbers[str] = field(default_factory=lambda: ContiguousNumbers[str](start=1))
    versions: dict[str, dict[int, TaskSetVersion]] = field(default_factory=dict)

    def apply(self, record: TaskSetVersion) -> bool:
        """Take one record in log order; False (void) when its version is not the name's next one."""
        if not self.gate.accept(record.name, record.version):
            return False
        self.versions.setdefault(record.name, {})[record.version] = record
        return True

    def latest(self, name: str) -> TaskSetVersion | None:
        versions = self.versions.get(name, {})
        return versions[max(versions)] if versions else None

    def resolve(self, ref: str) -> TaskSetVersion | None:
        """The version ``NAME@V`` names, or ``NAME``'s latest; None while it is not on the log."""
        name, version = parse_ref(ref)
        return self.latest(name) if version is None else self.versions.get(name, {}).get(version)

    def names(self) -> list[str]:
        return sorted(self.versions)


def load_registry(records: Iterable[TaskSetVersion]) -> TaskSetRegistry:
    registry = TaskSetRegistry()
    for record in records:
        registry.apply(record)
    return registry


def next_version(registry: TaskSetRegistry, name: str, tasks: list[HeldOutTask], *, source: str, by: str,
                 now: datetime) -> TaskSetVersion | None:
    """The version to write for ``tasks`` under ``name``: None when they are the latest version's already."""
    check_name(name)
    digest = tasks_digest(tasks)
    latest = registry.latest(name)
    if latest is not None and latest.digest == digest:
        return None
    record = TaskSetVersion(name=name, version=registry.gate.next(name), tasks=tasks, digest=digest,
                            source=source[: limits.MAX_DEAD_LETTER_NAME_CHARS],
                            registered_by=by[: limits.MAX_DEAD_LETTER_NAME_CHARS], registered_at=now)
    size = len(record.to_json_bytes())
    if size > limits.MAX_TASK_SET_BYTES:
        raise TaskSetError(f"{name}: the set is {size:,} bytes as a record, more than {limits.MAX_TASK_SET_BYTES:,}: "
                           f"split it into sets of fewer or shorter tasks")
    return record


@dataclass(frozen=True)
class PinnedTask:
    """A task of the held-out set version a promoter scores on (``task_set`` is its ``name@version``)."""

    task_set: str
    task: HeldOutTask

    @property
    def task_id(self) -> str:
        return self.task.task_id

    @property
    def key(self) -> str:
        """What results are cached by (with the content digest): results of one set version are never another's."""
        return task_key(self.task_set, self.task.task_id)


def task_key(task_set: str, task_id: str) -> str:
    """The cache key of a result: ``name@version/task_id`` (a result without ``task_set``: ``/task_id``, which
    counts for any set's task of that id)."""
    return f"{task_set}/{task_id}"


def pinned_tasks(version: TaskSetVersion) -> tuple[PinnedTask, ...]:
    return tuple(PinnedTask(version.label, task) for task in version.tasks)


def parse_pins(spec: str) -> dict[str, str]:
    """``COMBEE_HELD_OUT_SETS``: ``"support=support-heldout@2,*=suite"`` -> playbook id (or ``*``) -> set ref."""
    pins: dict[str, str] = {}
    for part in spec.split(","):
        if not part.strip():
            continue
        playbook, equals, ref = part.partition("=")
        playbook = playbook.strip()
        if not equals or not playbook or not ref.strip():
            raise TaskSetError(f"held-out set pin {part.strip()!r}: write PLAYBOOK=SET or PLAYBOOK=SET@VERSION "
                               f"('*' for every other playbook)")
        parse_ref(ref)
        if playbook in pins:
            raise TaskSetError(f"held-out set pins: {playbook!r} is pinned twice")
        pins[playbook] = ref.strip()
    return pins


def pinned_ref(pins: dict[str, str], playbook_id: str) -> str | None:
    """The set ref a playbook is pinned to (its own pin, else ``*``'s), or None."""
    return pins.get(playbook_id, pins.get(EVERY_PLAYBOOK))


def unpinned_reason(playbook_id: str) -> str:
    return (f"no held-out task set is pinned for playbook {playbook_id!r}: register your tasks (`combee tasks add "
            f"NAME FILE`) and pin them (COMBEE_HELD_OUT_SETS={playbook_id}=NAME); docs/operations.md, 'Gating on "
            f"your own tasks'")
