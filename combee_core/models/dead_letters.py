"""Dead letters: what a stage could not process, kept with the reason."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from combee_core import limits
from combee_core.models.base import SCHEMA_VERSION, CombeeModel, Timestamp, _base64_length


class DeadLetter(CombeeModel):
    """A message a stage could not process, kept with the reason instead of being dropped.

    Bounded whatever the input: only the first 64 KiB of the original are kept, with its full size and sha256, and
    every text field is capped, so a dead letter serialises to less than 512 KiB and can always be produced.
    """

    schema_version: Literal[1] = SCHEMA_VERSION
    stage: Annotated[str, Field(max_length=limits.MAX_DEAD_LETTER_NAME_CHARS)]
    reason: Annotated[str, Field(max_length=limits.MAX_DEAD_LETTER_REASON_CHARS)]
    error_type: Annotated[str, Field(max_length=limits.MAX_DEAD_LETTER_NAME_CHARS)]
    original_text: Annotated[str, Field(max_length=limits.MAX_DEAD_LETTER_ORIGINAL_BYTES)] | None = Field(
        default=None, description="The original bytes (at most the first 64 KiB) when they are valid UTF-8."
    )
    original_base64: Annotated[str, Field(max_length=_base64_length(limits.MAX_DEAD_LETTER_ORIGINAL_BYTES))] | None = (
        Field(default=None, description="The original bytes (at most the first 64 KiB) otherwise.")
    )
    original_size: int = Field(ge=0, description="Size of the whole original message, in bytes.")
    original_sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")] | None = Field(
        default=None, description="sha256 (hex) of the whole original message, kept or not."
    )
    truncated: bool = Field(default=False, description="True when only the first bytes of the original are kept.")
    topic: Annotated[str, Field(max_length=limits.MAX_DEAD_LETTER_NAME_CHARS)] | None = None
    partition: int | None = None
    offset: int | None = None
    key: Annotated[str, Field(max_length=limits.MAX_DEAD_LETTER_KEY_CHARS)] | None = None
    trace_id: Annotated[str, Field(max_length=limits.MAX_ID_CHARS)] | None = Field(
        default=None, description="The record's trace_id when it had a readable one, even if the record was invalid."
    )
    playbook_id: Annotated[str, Field(max_length=limits.MAX_PLAYBOOK_ID_CHARS)] | None = Field(
        default=None, description="The record's playbook_id when it had a readable one."
    )
    occurred_at: Timestamp
