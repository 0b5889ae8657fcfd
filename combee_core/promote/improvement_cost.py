"""What a promoted improvement cost: each candidate's LLM calls, tokens and dollars since the incumbent, per
held-out point gained."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from combee_core.models import BatchManifest, ImprovementCost, PlaybookVersion, Usage


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
