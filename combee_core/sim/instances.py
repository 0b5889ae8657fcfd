"""Honest mode's grader feedback about one task instance (``docs/simulator.md``, "Feedback is about the task
instance").

Each of the suite's actions has an *expected* template (this instance's expected answer and the answer given, which
is what the opposite rule yields on the same values) and a *check* template (which check of this instance failed,
without the expected value). Values are drawn per instance from a ``random.Random`` seeded by the caller. No
template names a subject, a section or a rule, and none contains an action phrasing of ``wordings.py``: feedback
is never a text the registry credits. Templates hand-written once, before any benchmark run on them.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, timedelta
from functools import lru_cache
from typing import Literal

InstanceKind = Literal["expected", "check"]

_FIELD = re.compile(r"\{(\w+)\}")


@dataclass(frozen=True)
class InstanceTemplates:
    """The two feedback templates of one action and the draw of an instance's values."""

    expected: str
    check: str
    values: Callable[[random.Random], dict[str, str]]

    def render(self, kind: InstanceKind, rng: random.Random, *, swapped: bool = False) -> str:
        """The line; ``swapped``: a wrong grader's, expecting what the opposite rule gives (``right`` and ``given``,
        or ``first`` and ``second``, exchanged). Raises ``ValueError`` for an action whose values cannot swap."""
        values = self.values(rng)
        if swapped:
            pair = next((p for p in (("right", "given"), ("first", "second")) if set(p) <= set(values)), None)
            if pair is None:
                raise ValueError(f"a wrong grader cannot swap the values of {sorted(values)}")
            values = {**values, pair[0]: values[pair[1]], pair[1]: values[pair[0]]}
        return (self.expected if kind == "expected" else self.check).format(**values)

    def kind_of(self, line: str) -> InstanceKind | None:
        """Which of the two templates wrote ``line`` (the simulator recognises its own sentences), or None."""
        if _pattern(self.expected).fullmatch(line.strip()):
            return "expected"
        if _pattern(self.check).fullmatch(line.strip()):
            return "check"
        return None


@lru_cache(maxsize=64)
def _pattern(template: str) -> re.Pattern[str]:
    parts = _FIELD.split(template)
    return re.compile("".join(re.escape(p) if n % 2 == 0 else ".+?" for n, p in enumerate(parts)))


def _money(x: float) -> str:
    return f"{x:.2f}"


def _discount(rng: random.Random) -> dict[str, str]:
    price, coupon, tax = rng.randint(20, 400), rng.choice((5, 10, 15, 20)), rng.choice((5, 8, 10, 20))
    return {"price": _money(price), "coupon": _money(coupon), "tax": str(tax),
            "right": _money((price - coupon) * (1 + tax / 100)), "given": _money(price * (1 + tax / 100) - coupon)}


def _change(rng: random.Random) -> dict[str, str]:
    start = rng.randint(20, 200)
    end = start + rng.randint(5, 100)
    return {"start": str(start), "end": str(end), "right": f"{(end - start) / start * 100:.1f}",
            "given": f"{(end - start) / end * 100:.1f}"}


def _units(rng: random.Random) -> dict[str, str]:
    km, m = rng.randint(1, 9), rng.randint(100, 900)
    return {"km": str(km), "m": str(m), "right": str(km * 1000 + m), "given": str(km + m)}


def _days(rng: random.Random) -> dict[str, str]:
    first = date(2024, 1, 1) + timedelta(days=rng.randint(0, 300))
    span = rng.randint(3, 60)
    return {"first": first.isoformat(), "last": (first + timedelta(days=span)).isoformat(),
            "right": str(span + 1), "given": str(span)}


def _decimals(rng: random.Random) -> dict[str, str]:
    value = rng.randint(1000, 9_999_999) / 10_000
    return {"raw": f"{value:.4f}", "right": f"{value:.2f}", "given": str(round(value))}


def _header(rng: random.Random) -> dict[str, str]:
    columns = rng.sample(("id", "name", "amount", "date", "city", "score", "email"), 3)
    records = rng.randint(2, 9)
    return {"line": ",".join(columns), "right": str(records), "given": str(records + 1)}


def _pages(rng: random.Random) -> dict[str, str]:
    size, pages = rng.choice((20, 50, 100)), rng.randint(2, 6)
    return {"pages": str(pages), "right": str(size * (pages - 1) + rng.randint(1, size - 1)), "given": str(size)}


def _utc(rng: random.Random) -> dict[str, str]:
    offset, ahead = rng.choice((2, 3, 5)), rng.choice((15, 30, 45, 60))
    other = rng.randint(8 * 60, 17 * 60)
    local = other + ahead
    return {"first": f"{local // 60:02d}:{local % 60:02d}+{offset:02d}:00",
            "second": f"{other // 60:02d}:{other % 60:02d}+00:00"}


def _unit(rng: random.Random) -> dict[str, str]:
    return {"number": str(rng.randint(2, 999)), "unit": rng.choice(("kg", "km", "s", "MB", "l"))}


def _cells(rng: random.Random) -> dict[str, str]:
    a, b = rng.randint(1, 50), rng.randint(1, 50)
    return {"a": str(a), "b": str(b), "right": f"{(a + b) / 2:.1f}", "given": f"{(a + b) / 3:.1f}"}


def _order(rng: random.Random) -> dict[str, str]:
    values = rng.sample(range(1, 100), 4)
    return {"right": ", ".join(map(str, sorted(values))), "given": ", ".join(map(str, sorted(values, reverse=True)))}


def _path(rng: random.Random) -> dict[str, str]:
    first, second = rng.sample(("my", "old", "shared", "team", "new", "final"), 2)
    name = rng.choice(("report", "data", "notes", "export"))
    return {"path": f"/data/{first} {second}/{name}.csv"}


TEMPLATES: dict[str, InstanceTemplates] = {
    "apply the discount before the tax": InstanceTemplates(
        "Expected {right} for a {price} item with a {coupon} coupon and {tax}% tax; the answer was {given}.",
        "The total for a {price} item with a {coupon} coupon and {tax}% tax was wrong.", _discount),
    "divide by the earlier value, not the later one": InstanceTemplates(
        "Expected a change of {right}% from {start} to {end}; the answer was {given}%.",
        "The change from {start} to {end} was wrong.", _change),
    "convert to the same unit first": InstanceTemplates(
        "Expected {right} m for {km} km plus {m} m; the answer was {given}.",
        "The sum of {km} km and {m} m was wrong.", _units),
    "count the end date as included": InstanceTemplates(
        "Expected {right} days from {first} to {last}; the answer was {given}.",
        "The number of days from {first} to {last} was wrong.", _days),
    "keep two decimal places": InstanceTemplates(
        "Expected {right} for {raw}; the answer was {given}.",
        "The figure given for {raw} was wrong.", _decimals),
    "read the header row before the data": InstanceTemplates(
        "Expected {right} records in a file whose first line is {line}; the answer was {given}.",
        "The record count of a file whose first line is {line} was wrong.", _header),
    "use the last page token until it is empty": InstanceTemplates(
        "Expected {right} results over {pages} pages; the answer was {given}.",
        "The number of results over {pages} pages was wrong.", _pages),
    "normalise to UTC before comparing": InstanceTemplates(
        "Expected {first} to come before {second}; the answer put it after.",
        "The order of {first} and {second} was wrong.", _utc),
    "state the unit in the answer": InstanceTemplates(
        'Expected "{number} {unit}"; the answer was "{number}".',
        'The answer "{number}" was not accepted.', _unit),
    "treat an empty cell as missing, not zero": InstanceTemplates(
        "Expected a mean of {right} for the cells {a}, (empty), {b}; the answer was {given}.",
        "The mean of the cells {a}, (empty), {b} was wrong.", _cells),
    "sort ascending unless told otherwise": InstanceTemplates(
        "Expected {right}; the answer was {given}.",
        "The order of the list {given} was wrong.", _order),
    "quote paths with spaces": InstanceTemplates(
        'Expected the argument "{path}" in quotes; the answer passed {path}.',
        "The command with the path {path} failed.", _path),
}
"""Action (as in ``combee_core.sim.task_suite._ACTIONS``) -> its instance feedback templates."""


def instance_line(action: str, kind: InstanceKind, rng: random.Random, *, swapped: bool = False) -> str:
    """One feedback line about an instance of a task whose family's action is ``action`` (``swapped``: a wrong
    grader's, see :meth:`InstanceTemplates.render`)."""
    return TEMPLATES[action].render(kind, rng, swapped=swapped)


def instance_kind(action: str, line: str) -> InstanceKind | None:
    """Which instance template of ``action`` wrote ``line``, or None."""
    return TEMPLATES[action].kind_of(line)
