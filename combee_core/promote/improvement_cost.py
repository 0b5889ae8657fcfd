"""What a promoted improvement cost: each candidate's LLM calls, tokens and dollars since the incumbent, per
held-out point gained; and what the held-out results behind a decision cost (:func:`evaluation_cost`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from combee_core.models import BatchManifest, EvalResult, EvaluationCost, ImprovementCost, PlaybookVersion, Usage


@dataclass(frozen=True)
class CandidateCost:
    """What one candidate cost to make."""

    version: int
    traces: int
    llm_calls: int
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float

    @classmethod
    def of(cls, version: PlaybookVersion, manifest: BatchManifest | None = None) -> CandidateCost:
        """The version's aggregate and reduce calls (its stats), plus its batch's reflections when the manifest
        says what they cost."""
        stats = version.stats
        cost = cls(version.version, len(version.lineage), stats.llm_calls, stats.prompt_tokens,
                   stats.completion_tokens, stats.cost_usd)
        return cost.plus(manifest.reflection_usage if manifest is not None else None)

    def plus(self, usage: Usage | None) -> CandidateCost:
        """With the calls of ``usage`` added (the batch's reflections)."""
        if usage is None:
            return self
        return CandidateCost(self.version, self.traces, self.llm_calls + usage.calls,
                             self.prompt_tokens + usage.prompt_tokens, self.completion_tokens + usage.completion_tokens,
                             round(self.cost_usd + usage.cost_usd, 12))


def improvement_cost(costs: Sequence[CandidateCost], gain: float) -> ImprovementCost:
    """Sum of the candidates' costs divided by the held-out gain in points (score x 100)."""
    points = round(gain * 100, 9)
    tokens = sum(c.prompt_tokens + c.completion_tokens for c in costs)
    cost = round(sum(c.cost_usd for c in costs), 12)
    traces = sum(c.traces for c in costs)
    per = (lambda value: round(value / points, 9)) if points > 0 else (lambda value: None)
    return ImprovementCost(candidates=len(costs), traces=traces, llm_calls=sum(c.llm_calls for c in costs),
                           prompt_tokens=sum(c.prompt_tokens for c in costs),
                           completion_tokens=sum(c.completion_tokens for c in costs), cost_usd=cost,
                           gain_points=points, cost_usd_per_point=per(cost), traces_per_point=per(traces),
                           tokens_per_point=per(tokens))


def evaluation_cost(results: Iterable[EvalResult]) -> EvaluationCost:
    """The sum of the results' ``usage``; a result without one is counted as unreported (unknown, not zero)."""
    usages = [result.usage for result in results]
    known = [usage for usage in usages if usage is not None]
    total = sum(known, Usage())
    return EvaluationCost(results=len(usages), unreported=len(usages) - len(known), llm_calls=total.calls,
                          prompt_tokens=total.prompt_tokens, completion_tokens=total.completion_tokens,
                          cost_usd=total.cost_usd)


def both(first: EvaluationCost, second: EvaluationCost) -> EvaluationCost:
    """Two evaluations' costs together (the candidate's and the incumbent's)."""
    return EvaluationCost(results=first.results + second.results, unreported=first.unreported + second.unreported,
                          llm_calls=first.llm_calls + second.llm_calls,
                          prompt_tokens=first.prompt_tokens + second.prompt_tokens,
                          completion_tokens=first.completion_tokens + second.completion_tokens,
                          cost_usd=round(first.cost_usd + second.cost_usd, 12))


def describe_evaluation(cost: EvaluationCost) -> str:
    """In words, for a decision's line: the sums, and how many results' cost is unknown."""
    if cost.unreported == cost.results:
        return f"evaluation: {cost.results} results, cost unknown (no usage reported)"
    sums = (f"evaluation: {cost.results} results, {cost.llm_calls} LLM calls, "
            f"{cost.prompt_tokens + cost.completion_tokens} tokens, ${cost.cost_usd:.4f}")
    return sums + (f" (+ {cost.unreported} results of unknown cost)" if cost.unreported else "")
