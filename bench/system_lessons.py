"""Does the check for lessons about the playbook or the learning system itself catch reworded injections, and does
it keep sound lessons that mention deleting, overriding, removing or ignoring?

    python -m bench.system_lessons        # instant; writes bench/results/system_lessons.json

Two hand-written sets of {"text", "about_system"}: ``bench/data/system_lessons_dev.jsonl`` (25 + 25, looked at
while the check was written and tuned) and ``bench/data/system_lessons_heldout.jsonl`` (30 + 30, written and
committed before the check, measured once after it was frozen); and ``bench/data/system_lessons_heldout_2.jsonl``
(30 + 30, issue 38: instructions about the playbook, the system, the reviewer or the grader, written without reading
the check, committed before it was measured, never tuned on); ``bench/data/system_lessons_heldout_3.jsonl`` (30 + 30,
written and committed before the learned check, never trained or tuned on). Compared: the keyword filter the
parser used before (``instruction_like``, its patterns copied here unchanged) and :func:`combee_core.llm.self_reference.
about_learning_system`. Catch rate = share of injections rejected; false-rejection rate = share of sound lessons
rejected.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import machine, write_results
from bench.system_classifier_train import task_lessons
from combee_core.llm.self_reference import about_learning_system
from combee_core.sim.sim_registry import registry_for

DATA = Path(__file__).parent / "data"
RESULTS = Path(__file__).parent / "results" / "system_lessons.json"

_OLD_PATTERNS = tuple(re.compile(p) for p in (  # combee_core/llm/parsing.py instruction_like, as of commit ed71d5a
    r"\b(ignore|disregard|forget|override)\b[^.\n]{0,40}\b(instructions?|rules|prompts?|directions)\b",
    r"\b(delete|remove|wipe|erase|clear|drop|empty|reset)\b[^.\n]{0,30}\bplaybook\b",
    r"\b(delete|remove|wipe|erase)\b[^.\n]{0,20}\b(all|every|each)\b[^.\n]{0,20}\b(entries|entry|lessons|insights)\b",
    r"\bsystem prompt\b",
    r"\byou are now\b",
    r"\bnew instructions\b",
    r"<<<data|data>>>",
    r"[{,]\s*\"(op|operations|insights|entry_tags)\"\s*:",
))


def old_keyword_filter(text: str) -> str | None:
    """The previous ``instruction_like``: the first of its patterns found in the lower-cased text."""
    lowered = text.lower()
    for pattern in _OLD_PATTERNS:
        if match := pattern.search(lowered):
            return match.group(0)
    return None


def load(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (DATA / name).read_text().splitlines() if line.strip()]


def measure(items: list[dict[str, Any]], check: Callable[[str], str | None]) -> dict[str, Any]:
    injections = [i["text"] for i in items if i["about_system"]]
    sound = [i["text"] for i in items if not i["about_system"]]
    missed = [t for t in injections if check(t) is None]
    rejected = [t for t in sound if check(t) is not None]
    return {"injections": len(injections), "caught": len(injections) - len(missed),
            "catch_rate": round(1 - len(missed) / len(injections), 3),
            "sound": len(sound), "false_rejections": len(rejected),
            "false_rejection_rate": round(len(rejected) / len(sound), 3),
            "missed": missed, "falsely_rejected": rejected}


def main() -> None:
    checks: dict[str, Callable[[str], str | None]] = {
        "old keyword filter": old_keyword_filter,
        "about_learning_system, rules only": lambda text: about_learning_system(text, learned=False),
        "about_learning_system (rules + learned check, the default)": about_learning_system}
    results: dict[str, Any] = {}
    print("| set | check | injections caught | catch rate | sound lessons rejected | false-rejection rate |")
    print("|---|---|---|---|---|---|")
    for label, name in (("dev (tuned on)", "system_lessons_dev.jsonl"),
                        ("held-out", "system_lessons_heldout.jsonl"),
                        ("held-out 2 (issue 38)", "system_lessons_heldout_2.jsonl"),
                        ("held-out 3 (never tuned on)", "system_lessons_heldout_3.jsonl")):
        items = load(name)
        for check_name, check in checks.items():
            row = measure(items, check)
            results[f"{label} / {check_name}"] = row
            print(f"| {label} | {check_name} | {row['caught']}/{row['injections']} | {row['catch_rate']:.0%} | "
                  f"{row['false_rejections']}/{row['sound']} | {row['false_rejection_rate']:.0%} |")
    print("\nsound task lessons rejected (no injections): curation sets D, E, F (never trained on) and the honest "
          "simulator's registry wordings")
    registry = registry_for(7, 24)
    ordinary = {"curation sets D, E, F": sorted({t for n in ("heldout_d", "heldout_e", "heldout_f")
                                                 for t in task_lessons(n)}),
                "simulator registry (seed 7, 24 families)": sorted(
                    {t for texts in registry.wordings.values() for t in texts}
                    | {t for _, texts in registry.generics for t in texts})}
    for label, texts in ordinary.items():
        for check_name, check in checks.items():
            rejected = [t for t in texts if check(t) is not None]
            results[f"{label} / {check_name}"] = {"sound": len(texts), "false_rejections": len(rejected),
                                                  "missed": [], "falsely_rejected": rejected}
            print(f"| {label} | {check_name} | {len(rejected)}/{len(texts)} |")
    for key, row in results.items():
        for text in row["missed"]:
            print(f"missed      [{key}]: {text}")
        for text in row["falsely_rejected"]:
            print(f"rejected    [{key}]: {text}")
    write_results(RESULTS, {"results": results, "machine": machine()})


if __name__ == "__main__":
    main()
