"""Redaction against a hand-written corpus (tests/redaction_corpus.py) and generated secret shapes: no value survives
in any text field of a trace; ordinary lessons and simulated traces are counted for false positives
(docs/redaction.md, "Proof")."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from combee_core.ingest.detectors import luhn_valid
from combee_core.ingest.redaction import DETECTORS, RedactionConfig, Redactor, redact_trace
from combee_core.models import Trace
from combee_core.sim.sim_registry import registry_for
from combee_core.sim.task_suite import build_suite, train_traces
from tests.redaction_corpus import ORDINARY_LESSONS, SECRETS

BASE = train_traces(build_suite(seed=7), 4, playbook_ids=("pb",), run_seed=0, agents=4)
LESSON_FALSE_POSITIVES = 0
"""Ordinary lessons changed by redaction (docs/redaction.md states the same count)."""


def strings(value: Any) -> list[str]:
    """Every string in a dumped model, keys included."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for key, item in value.items() for s in [key, *strings(item)]]
    if isinstance(value, list):
        return [s for item in value for s in strings(item)]
    return []


def text(value: str) -> str:
    return Redactor(RedactionConfig()).text(value)


def test_the_corpus_has_at_least_60_cases_covering_every_form_the_issue_names():
    kinds = Counter(case.kind for case in SECRETS)
    assert len(SECRETS) >= 60
    for kind in ("label_", "label-", "label.", "json", "yaml", "header", "url", "key", "conn", "email", "card"):
        assert kinds[kind] >= 2, kind


def test_no_corpus_value_survives_in_any_text_field_of_a_trace():
    leaks = []
    for n, case in enumerate(SECRETS):
        base = BASE[n % len(BASE)]
        trace = Trace.model_validate({**base.model_dump(), **{
            "input": f"{base.input}\n{case.text}", "output": f"ok: {case.text}", "feedback": f"{case.text} (noted)",
            "steps": [*base.steps, {"role": "tool", "content": case.text, "tool": "shell"}],
            "metadata": {**base.metadata, "note": case.text[:2000]}}})
        clean, counts = redact_trace(trace)
        found = strings(clean.model_dump())
        leaks += [(case.kind, value) for value in case.values if any(value in s for s in found)]
        assert counts, case.text
    assert leaks == []


def test_each_corpus_case_is_redacted_on_its_own_line():
    assert [(case.kind, case.text) for case in SECRETS if any(v in text(case.text) for v in case.values)] == []


def test_ordinary_lessons_are_counted_false_positives():
    changed = [(lesson, text(lesson)) for lesson in ORDINARY_LESSONS if text(lesson) != lesson]
    assert len(changed) == LESSON_FALSE_POSITIVES, changed


def test_every_lesson_the_simulator_can_write_passes_unchanged():
    registry = registry_for(7, 32)
    lessons = [t for texts in registry.wordings.values() for t in texts] + [
        t for texts in registry.hints.values() for t in texts] + [t for _, texts in registry.generics for t in texts]
    assert len(lessons) > 1000
    assert [lesson for lesson in lessons if text(lesson) != lesson] == []


def test_simulated_traces_pass_unchanged_with_the_library_detector():
    assert DETECTORS["secret"][0].name == "SECRET" and len(DETECTORS["secret"]) == 2  # library, then our rules
    for trace in train_traces(build_suite(seed=5), 200, playbook_ids=("pb",), run_seed=5, agents=20):
        assert redact_trace(trace)[0] == trace


# -- generated secret shapes -------------------------------------------------------------------------------------

KEYWORDS = ("password", "passwd", "passphrase", "secret", "token", "api_key", "apikey", "access_token",
            "client_secret", "private_key", "auth_token", "secret_key", "access_key", "credentials", "pwd")
PREFIXES = ("", "db", "my", "aws", "prod", "app", "stripe", "x", "smtp", "pg")
VALUE_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!#$%*+-.=?^_~"
WORDS = ("the", "tool", "said", "then", "ran", "deploy", "with", "and", "retry", "ok")


@st.composite
def labelled_secret(draw: st.DrawFn) -> tuple[str, str]:
    keyword = draw(st.sampled_from(KEYWORDS))
    prefix = draw(st.sampled_from(PREFIXES))
    joiner = draw(st.sampled_from(("_", "-", ".", "")))
    if keyword == "pwd" and not joiner:
        joiner = "_"  # a short keyword is a label only as a whole part (docs/redaction.md: DBPWD=... is not)
    label = f"{prefix}{joiner}{keyword}" if prefix else keyword
    camel = label.title().replace(joiner, "") if joiner else label
    label = draw(st.sampled_from((label.lower(), label.upper(), camel)))
    value = draw(st.text(VALUE_CHARS, min_size=6, max_size=40).filter(
        lambda v: any(c.isdigit() for c in v) and any(c.isalpha() for c in v) and v[0] not in "-.="))
    form = draw(st.sampled_from((
        "{l}={v}", "export {l}={v}", "{l}: {v}", "{l} = '{v}'", '"{l}": "{v}"', "{l}: \"{v}\"", "--{l}={v}",
        "--{l} {v}", "  {l}: {v}\n", "{{\\\"{l}\\\": \\\"{v}\\\"}}", "?x=1&{l}={v}&y=2", "Server=db;{l}={v};")))
    words = " ".join(draw(st.lists(st.sampled_from(WORDS), max_size=4)))
    return f"{words} {form.format(l=label, v=value)} {words}", value


@st.composite
def url_secret(draw: st.DrawFn) -> tuple[str, str]:
    scheme = draw(st.sampled_from(("https", "postgres", "redis", "mongodb+srv", "amqp", "mysql")))
    user = draw(st.sampled_from(("", "app", "deploy", "admin")))
    value = draw(st.text(VALUE_CHARS.replace("=", "").replace("?", ""), min_size=5, max_size=30).filter(
        lambda v: any(c.isdigit() for c in v)))
    return f"connect to {scheme}://{user}:{value}@db.example.net:5432/app now", value


def unicode_word(min_size: int) -> st.SearchStrategy[str]:
    letters = st.characters(categories=("Ll", "Lu", "Lo"), max_codepoint=0xFFFF)
    return st.text(letters, min_size=min_size, max_size=12)


@st.composite
def email(draw: st.DrawFn) -> tuple[str, str]:
    local = draw(unicode_word(1)) + draw(st.sampled_from(("", ".", "+", "_", "-"))) + draw(unicode_word(1))
    domain = ".".join(draw(st.lists(unicode_word(1), min_size=1, max_size=3)))
    tld = draw(st.sampled_from(("es", "de", "com", "рф", "jp", "io"))) if draw(st.booleans()) else draw(
        st.text(st.characters(categories=("Ll",), max_codepoint=0xFFFF), min_size=2, max_size=6))
    address = f"{local}@{domain}.{tld}"
    return f"write to {address} today", address


@st.composite
def card(draw: st.DrawFn) -> tuple[str, str]:
    prefix = draw(st.sampled_from(("4", "51", "55", "2221", "34", "37", "6011", "65", "36")))
    length = 15 if prefix in ("34", "37") else draw(st.sampled_from((13, 16, 19))) if prefix == "4" else 16
    rng = random.Random(draw(st.integers(0, 2**32)))
    body = prefix + "".join(str(rng.randrange(10)) for _ in range(length - len(prefix) - 1))
    total = sum(int(d) * 2 - 9 if i % 2 == 0 and int(d) > 4 else int(d) * (2 if i % 2 == 0 else 1)
                for i, d in enumerate(reversed(body)))
    digits = body + str((10 - total % 10) % 10)
    assert luhn_valid(digits)
    separator = draw(st.sampled_from((" ", "  ", "\u00a0", "\u202f", "\u2007", "-", "/", ".", "")))
    number = separator.join(digits[i:i + 4] for i in range(0, len(digits), 4))
    return f"paid with {number} yesterday", number


@settings(max_examples=300, deadline=None)
@given(st.one_of(labelled_secret(), url_secret(), email(), card()))
def test_a_generated_secret_or_personal_datum_never_survives(example: tuple[str, str]) -> None:
    line, value = example
    assert value not in text(line)
