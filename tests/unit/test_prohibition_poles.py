"""A prohibition negates every pole of its clause (``combee_core.playbook.conflict``): "Never count a cancelled order
in the weekly report as the number zero" says the value is not zero, however far the pole sits from the "never".
Before, only a negation among the six words before a pole counted, so that rule read as "zero" and the conflict
check called it and "... as missing, not zero" (one rule in two wordings) a contradiction. Wordings are this test's
own, written for it."""

from __future__ import annotations

import pytest

from combee_core.playbook.conflict import RuleFeatures, conflict_reason

FAR_PROHIBITION = "Never count a cancelled order in the weekly sales report as the number zero."
MISSING = "Treat a cancelled order in the weekly sales report as missing, not zero."
ZERO = "Count a cancelled order in the weekly sales report as zero."


def test_a_pole_far_from_the_never_of_its_clause_is_negated() -> None:
    assert RuleFeatures.of(FAR_PROHIBITION).poles["value"] == frozenset({"missing"})


def test_two_wordings_of_one_rule_are_no_conflict() -> None:
    assert conflict_reason(FAR_PROHIBITION, MISSING) is None


@pytest.mark.parametrize("rule", [FAR_PROHIBITION, MISSING])
def test_the_opposite_rule_still_conflicts(rule: str) -> None:
    assert conflict_reason(rule, ZERO) is not None
