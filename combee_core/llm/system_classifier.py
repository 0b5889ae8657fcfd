"""The learned half of the check for lessons about the learning system: a logistic regression over the shipped
sentence encoder's vectors (all-MiniLM-L6-v2 int8, :mod:`combee_core.playbook.onnx_embedding`; nothing downloaded at
run time).

The weights (``data/system_lessons_classifier.json``, 384 numbers and a bias) are written by
``python -m bench.system_classifier_train`` from the hand-written sets the rules were tuned on
(``bench/data/system_lessons_dev.jsonl``, ``..._heldout.jsonl``, ``..._heldout_2.jsonl``) and, as further sound
lessons, the curation sets' task lessons (``bench/data/lessons_{dev,heldout,heldout_b,heldout_c}.json``, weight 0.1
each). Chosen by leave-one-set-out on those sets (``docs/benchmarks-history.md``, "Lessons about the learning
system, a third held-out set"); ``bench/data/system_lessons_heldout_3.jsonl`` was written before and never trained
or tuned on.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from functools import cache
from pathlib import Path

WEIGHTS = Path(__file__).parent / "data" / "system_lessons_classifier.json"
THRESHOLD = 0.7
"""A lesson is about the system when the model's probability exceeds this (chosen by leave-one-set-out: at 0.7 no
sound lesson more than the rules already reject, at 0.5 three to eight more)."""


class SystemLessonClassifier:
    """Probability that a lesson instructs about the playbook, the system or the reviewer rather than the task."""

    def __init__(self, weights: Sequence[float], bias: float, threshold: float = THRESHOLD) -> None:
        from combee_core.playbook.onnx_embedding import MiniLMEmbedder

        self._weights = list(weights)
        self._bias = bias
        self.threshold = threshold
        self._embedder = MiniLMEmbedder()

    @classmethod
    def load(cls, path: Path = WEIGHTS) -> SystemLessonClassifier:
        data = json.loads(path.read_text())
        return cls(data["weights"], data["bias"], data.get("threshold", THRESHOLD))

    def probability(self, text: str) -> float:
        [vector] = self._embedder.embed([text])
        score = sum(w * float(x) for w, x in zip(self._weights, vector, strict=True)) + self._bias
        return 1.0 / (1.0 + math.exp(-score))


@cache
def shipped_classifier() -> SystemLessonClassifier:
    """The shipped classifier, loaded once on first use (read-only afterwards)."""
    return SystemLessonClassifier.load()


@cache
def learned_verdict(text: str) -> float | None:
    """The shipped classifier's probability for ``text`` when it exceeds the threshold, else None (cached per text:
    a lesson restated in many reflections is embedded once)."""
    classifier = shipped_classifier()
    probability = classifier.probability(text)
    return probability if probability > classifier.threshold else None
