"""Size limits on free-text fields and messages, in one place so docs and schemas agree.

Limits are in characters (after JSON decoding) unless the name says bytes. They are generous for real agent
traces and small enough that one message never overloads a stage or the broker.
"""

MAX_MESSAGE_BYTES = 1_048_576
"""Largest trace message accepted on the traces topic (1 MiB). Larger ones become dead letters."""

MAX_ID_CHARS = 128
MAX_PLAYBOOK_ID_CHARS = 64
MAX_SECTION_CHARS = 48
MAX_TRACE_TEXT_CHARS = 65_536
MAX_FEEDBACK_CHARS = 16_384
MAX_STEP_CHARS = 16_384
MAX_STEPS = 256
MAX_METADATA_KEYS = 64
MAX_METADATA_VALUE_CHARS = 2_048
MAX_INSIGHT_CHARS = 1_000
MAX_INSIGHTS_PER_REFLECTION = 16
MAX_TAGS_PER_REFLECTION = 64
MAX_OPERATIONS_PER_UPDATE = 256
MAX_TASKS_PER_SET = 5_000
"""Tasks in one version of a held-out task set (its record must also fit a message: ``MAX_TASK_SET_BYTES``)."""
MAX_TASK_SET_BYTES = 4 * 1_048_576
"""Largest serialised task set version ``combee tasks add`` writes (under the producers' 8 MiB request size)."""

MAX_DEAD_LETTER_ORIGINAL_BYTES = 65_536
"""Dead letters keep at most this many bytes of the original message (its head), with its full size and sha256."""

MAX_DEAD_LETTER_REASON_CHARS = 4_000
MAX_DEAD_LETTER_KEY_CHARS = 1_024
MAX_DEAD_LETTER_NAME_CHARS = 256
"""Stage, error type and topic names in a dead letter."""

MAX_DEAD_LETTER_BYTES = 512 * 1024
"""Upper bound of a serialised dead letter, whatever the input: its text fields are capped above and JSON escapes at
most 6 bytes per character (``\\u0001``), so 6 x (64 KiB + 4,000 + 1,024 + ...) stays below it. Far under any
producer's max request size (1 MiB by default, 8 MiB here), so a dead letter can always be sent."""
