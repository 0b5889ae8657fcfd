"""Held-out task sets: a named, versioned list of tasks a team scores candidate playbooks on (the ``task-sets``
topic; ``combee tasks add``, ``combee_core.promote.task_sets``)."""

from __future__ import annotations

import hashlib
from typing import Annotated, Literal

import orjson
from pydantic import Field

from combee_core import limits
from combee_core.models.base import SCHEMA_VERSION, CombeeModel, Identifier, PlaybookId, Timestamp

TaskSetName = PlaybookId
"""A task set's name: letters, digits, ``.``, ``_`` and ``-`` (no ``@``: ``NAME@VERSION`` pins a version)."""

TaskText = Annotated[str, Field(max_length=limits.MAX_TRACE_TEXT_CHARS)]


class HeldOutTask(CombeeModel):
    """One task of a set: what the agent is asked (``input``) and, for an evaluator, the answer expected or the
    rubric to judge an answer by (either, both or neither)."""

    task_id: Identifier = Field(description="Unique within the set; a task id never changes meaning across the set's "
                                "versions (give a changed task a new id).")
    input: Annotated[str, Field(min_length=1, max_length=limits.MAX_TRACE_TEXT_CHARS)]
    expected: TaskText | None = Field(default=None, description="The answer expected, when there is one.")
    rubric: TaskText | None = Field(default=None, description="How to judge an answer, when there is no exact one.")
    metadata: dict[Annotated[str, Field(max_length=limits.MAX_ID_CHARS)],
                   Annotated[str, Field(max_length=limits.MAX_METADATA_VALUE_CHARS)]] = Field(
        default_factory=dict, max_length=limits.MAX_METADATA_KEYS)


def tasks_digest(tasks: list[HeldOutTask]) -> str:
    """sha256 of the tasks as registered, in order: two versions with the same digest hold the same tasks."""
    return hashlib.sha256(orjson.dumps([task.model_dump(mode="json") for task in tasks])).hexdigest()


class TaskSetVersion(CombeeModel):
    """One version of a task set on the ``task-sets`` topic (key: its name). Per name, versions are numbered 1, 2,
    ...; the first record of each (name, version) counts, as for playbook versions."""

    schema_version: Literal[1] = SCHEMA_VERSION
    name: TaskSetName
    version: int = Field(ge=1)
    tasks: list[HeldOutTask] = Field(min_length=1, max_length=limits.MAX_TASKS_PER_SET)
    digest: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")] = Field(description="tasks_digest(tasks).")
    source: Annotated[str, Field(max_length=limits.MAX_DEAD_LETTER_NAME_CHARS)] = Field(
        default="", description="Where the tasks came from (a file name), for people.")
    registered_by: Annotated[str, Field(max_length=limits.MAX_DEAD_LETTER_NAME_CHARS)] = ""
    registered_at: Timestamp

    @property
    def label(self) -> str:
        """``name@version``: how decisions and evaluation requests name it."""
        return f"{self.name}@{self.version}"
