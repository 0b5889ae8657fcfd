"""Drive a processor without a broker, as faust's ``Agent.test_context`` does: feed it inputs, collect its effects,
and ask what was published, rejected and acknowledged."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from combee_core.models import CombeeModel
from combee_core.processors.effects import Acknowledge, Count, Effect, Publish, Reject


@dataclass
class EffectLog:
    """Every effect a processor asked for, in order (``log.extend(processor.take(...))``)."""

    effects: list[Effect] = field(default_factory=list)

    def extend(self, effects: Iterable[Effect]) -> list[Effect]:
        """Record ``effects`` and return them (so a test can look at one call's effects too)."""
        batch = list(effects)
        self.effects.extend(batch)
        return batch

    def published(self, topic: str | None = None) -> list[CombeeModel]:
        """The models published (to ``topic`` only, when given), in order."""
        return [e.value for e in self.effects if isinstance(e, Publish) and topic in (None, e.topic)]

    def publishes(self, topic: str) -> list[Publish]:
        return [e for e in self.effects if isinstance(e, Publish) and e.topic == topic]

    def rejected(self) -> list[Reject]:
        return [e for e in self.effects if isinstance(e, Reject)]

    def acknowledged(self) -> list[object]:
        """Tokens acknowledged, in order (a token acknowledged twice appears twice)."""
        return [token for e in self.effects if isinstance(e, Acknowledge) for token in e.tokens]

    def counts(self) -> Counter[str]:
        counted: Counter[str] = Counter()
        for effect in self.effects:
            if isinstance(effect, Count):
                counted[effect.name] += effect.amount
        return counted

    def settled(self) -> Counter[object]:
        """How many times each token was acknowledged or rejected (each input should settle exactly once)."""
        done = Counter(self.acknowledged())
        done.update(e.token for e in self.rejected() if e.token is not None)
        return done
