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

MAX_DEAD_LETTER_ORIGINAL_BYTES = 4 * 1_048_576
"""Dead letters keep the original message up to this size; beyond it they keep the head and say `truncated`."""
