"""Train the learned half of the check for lessons about the learning system
(``combee_core/llm/system_classifier.py``) and write its weights.

    python -m bench.system_classifier_train          # writes combee_core/llm/data/system_lessons_classifier.json
    python -m bench.system_classifier_train --cv     # leave-one-set-out on the tuning sets, no file written

Trained on the hand-written system-lesson sets the rules were tuned on (dev, held-out, held-out 2) and, as sound
lessons of weight 0.1, the task lessons of the curation sets dev, A, B and C. Never on
``bench/data/system_lessons_heldout_3.jsonl`` nor on curation sets D, E and F (kept to measure false rejections).
Logistic regression, L2 0.001, 3,000 full-batch gradient steps of 0.5 from zero: deterministic.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from combee_core.llm.system_classifier import THRESHOLD, WEIGHTS
from combee_core.playbook.onnx_embedding import MINILM_MODEL, MiniLMEmbedder

DATA = Path(__file__).parent / "data"
SETS = ("dev", "heldout", "heldout_2")
TASK_LESSONS = ("dev", "heldout", "heldout_b", "heldout_c")
SOUND_WEIGHT, L2, STEPS, RATE = 0.1, 0.001, 3000, 0.5


def system_set(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (DATA / f"system_lessons_{name}.jsonl").read_text().splitlines() if line]


def task_lessons(name: str) -> list[str]:
    data = json.loads((DATA / f"lessons_{name}.json").read_text())
    texts = [t for lesson in data.get("lessons", []) for t in lesson["texts"]]
    texts += [t for pair in data.get("opposites", []) for t in (pair["a"], pair["b"])]
    texts += [v for c in data.get("corrections", []) for v in c.values() if isinstance(v, str) and " " in v]
    return sorted(set(texts))


def fit(x: np.ndarray, y: np.ndarray, weight: np.ndarray) -> tuple[np.ndarray, float]:
    w, b = np.zeros(x.shape[1]), 0.0
    for _ in range(STEPS):
        g = (1 / (1 + np.exp(-(x @ w + b))) - y) * weight
        w -= RATE * (x.T @ g / weight.sum() + L2 * w)
        b -= RATE * float(g.sum() / weight.sum())
    return w, b


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cv", action="store_true")
    args = parser.parse_args()
    embedder = MiniLMEmbedder()
    sets = {name: system_set(name) for name in SETS}
    vectors = {name: embedder.embed([i["text"] for i in items]) for name, items in sets.items()}
    labels = {name: np.array([bool(i["about_system"]) for i in items]) for name, items in sets.items()}
    sound = embedder.embed(sorted({t for name in TASK_LESSONS for t in task_lessons(name)}))

    def train(names: list[str]) -> tuple[np.ndarray, float]:
        x = np.vstack([vectors[n] for n in names] + [sound])
        y = np.concatenate([labels[n] for n in names] + [np.zeros(len(sound), bool)]).astype(float)
        weight = np.concatenate([np.ones(sum(len(vectors[n]) for n in names)), np.full(len(sound), SOUND_WEIGHT)])
        return fit(x, y, weight)

    if args.cv:
        for test in SETS:
            w, b = train([n for n in SETS if n != test])
            p = 1 / (1 + np.exp(-(vectors[test] @ w + b))) > THRESHOLD
            y = labels[test]
            print(f"{test}: caught {int((p & y).sum())}/{int(y.sum())}, sound rejected {int((p & ~y).sum())}/"
                  f"{int((~y).sum())} (the learned half alone)")
        return
    w, b = train(list(SETS))
    WEIGHTS.write_text(json.dumps({"model": MINILM_MODEL, "trained_on": [*SETS, *(f"lessons_{n}" for n in
                                                                                   TASK_LESSONS)],
                                   "threshold": THRESHOLD, "bias": round(b, 6),
                                   "weights": [round(float(v), 6) for v in w]}) + "\n")
    print(f"wrote {WEIGHTS}")


if __name__ == "__main__":
    main()
