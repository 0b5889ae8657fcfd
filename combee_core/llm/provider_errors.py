"""Which provider exceptions a failed LLM call is: not worth retrying, retryable, or a sign of overload (429 or
the provider's timeout: :mod:`combee_core.control.concurrency` backs off); and the ``Retry-After`` a provider sent."""

from __future__ import annotations

import functools
import math
from email.utils import parsedate_to_datetime
from typing import Any


@functools.cache
def provider_errors() -> tuple[tuple[type[BaseException], ...], ...]:
    """(non-retryable, retryable, overload) provider exceptions; litellm's types derive from the openai SDK's."""
    import openai

    non_retryable = (
        openai.BadRequestError,
        openai.AuthenticationError,
        openai.PermissionDeniedError,
        openai.NotFoundError,
        openai.UnprocessableEntityError,
    )
    return non_retryable, (openai.APIError,), (openai.RateLimitError, openai.APITimeoutError)


def retry_after_s(error: BaseException, now: float | None = None) -> float | None:
    """Seconds the provider asked us to wait (its ``Retry-After`` header: seconds or an HTTP date), or None."""
    response: Any = getattr(error, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    try:
        raw = headers.get("retry-after") or headers.get("Retry-After")
    except AttributeError:
        return None
    if not raw:
        return None
    try:
        seconds = float(raw)
    except ValueError:
        try:
            when = parsedate_to_datetime(str(raw))
        except (TypeError, ValueError):
            return None
        import time

        seconds = when.timestamp() - (time.time() if now is None else now)
    return seconds if math.isfinite(seconds) and seconds > 0 else None
