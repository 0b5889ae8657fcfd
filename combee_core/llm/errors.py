"""Typed errors of the LLM layer. A stage turns them into dead letters; nothing here is swallowed."""

from __future__ import annotations

from combee_core.errors import CombeeError

PREVIEW_CHARS = 500
"""How much of a model's raw text an :class:`LLMOutputError` keeps."""


def preview(text: str | None, limit: int = PREVIEW_CHARS) -> str:
    """The head of ``text``, marked when cut, for error messages and dead letters."""
    if text is None:
        return ""
    return text if len(text) <= limit else text[:limit] + f"... [{len(text) - limit} more chars]"


class LLMError(CombeeError):
    """Base of the LLM layer's errors: which role and model failed, and why."""

    def __init__(self, role: str, model: str, reason: str, attempts: int = 0) -> None:
        self.role = role
        self.model = model
        self.reason = reason
        self.attempts = attempts
        super().__init__(role, model, reason)

    def __str__(self) -> str:
        after = f" after {self.attempts} attempt(s)" if self.attempts else ""
        return f"{self.role} call to {self.model!r} failed{after}: {self.reason}"


class LLMCallError(LLMError):
    """The call itself failed (timeout, connection, provider error) and retries did not help."""

    def __init__(self, role: str, model: str, reason: str, attempts: int = 0, retryable: bool = True,
                 overload: bool = False, retry_after_s: float | None = None) -> None:
        self.retryable = retryable
        self.overload = overload
        """A rate-limit answer (429) or a timeout: the model's calls back off
        (:mod:`combee_core.control.concurrency`)."""
        self.retry_after_s = retry_after_s
        """The provider's ``Retry-After``, seconds, when it sent one."""
        super().__init__(role, model, reason, attempts)


class LLMOutputError(LLMError):
    """The model answered, but nothing usable could be parsed from its text (even after repair and re-asking)."""

    def __init__(self, role: str, model: str, reason: str, raw_text: str | None = None, attempts: int = 0) -> None:
        self.raw_preview = preview(raw_text)
        super().__init__(role, model, reason, attempts)

    def __str__(self) -> str:
        base = super().__str__()
        return f"{base} (raw text: {self.raw_preview!r})" if self.raw_preview else base


class PromptTooLarge(LLMError):
    """The items a call would carry are over the payload cap (``COMBEE_LLM_PAYLOAD_TOKENS``): the call is not made.
    The stage handles it as a failed call (the aggregator dead-letters the window's traces, the reducer applies the
    union of its children unmerged), so nothing is cut silently."""
