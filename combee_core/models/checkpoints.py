"""Checkpoints of the stages' live views of state topics."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from combee_core.models.base import SCHEMA_VERSION, CombeeModel, Timestamp


class ViewCheckpoint(CombeeModel):
    """Where a stage's live view of a state topic can resume instead of reading it from the beginning.

    Replaying the topic from ``position`` with the number gates at ``nexts`` (and, for the playbook view, the
    latest version records at ``latest``) rebuilds the same state as a read from offset 0. Written every
    ``view_checkpoint_every`` records by any replica (the same log prefix gives the same checkpoint)."""

    schema_version: Literal[1] = SCHEMA_VERSION
    view: str = Field(description="<stage>/<logical topic>, e.g. batch/batches")
    position: int = Field(ge=0, description="Offset to resume reading from.")
    nexts: dict[str, int] = Field(description="Per playbook, the number the next valid record must carry there.")
    latest: dict[str, int] = Field(default_factory=dict, description="Per playbook, offset of the record to load "
                                   "before resuming (the playbook view: the latest valid version, and under "
                                   "'<playbook>~' the one before, the aggregators' context with context_lag 1).")
    written_at: Timestamp
