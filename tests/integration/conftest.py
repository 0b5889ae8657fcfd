"""Fixtures the integration tests share."""

from __future__ import annotations

import pytest

from streams.testing.browser import browser_unavailable


@pytest.fixture
def browser_ready() -> None:
    """A test of a page in headless Chromium: fails where Chromium could be installed but is not, else skips."""
    problem = browser_unavailable()
    if problem is not None:
        why, installable = problem
        if installable:
            pytest.fail(f"no browser for the review page test: {why}")
        pytest.skip(why)
