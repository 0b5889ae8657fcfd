"""How often the LLM judge agrees with exact scoring on the simulator's tasks, where the truth is known (issue 41
item 3; docs/benchmarks.md, "The LLM judge's agreement with exact scoring").

The suite's 120 held-out tasks become a task set with expected answers (each family's rule's action, what an agent
following the rule answers: docs/simulator.md, "The agent and the judge of the LLM judge evaluator"). A seeded
random walk makes candidate playbooks (each step adds a family's rule, adds its harmful rule, or removes the family's
entries). For every playbook and task the judge's agent answers through ``JudgeRoles`` on ``combee-sim`` models;
*exact scoring* is 1 when that answer is the expected answer, the judge's score is its verdict. Printed: the agreement
rate and confusion counts per task, and whether the promotion rule (held_out >= incumbent - epsilon) decides each
step of the walk (candidate against the step before it) the same on both scores.

    python -m bench.judge_agreement [--seeds 0 1 2] [--steps 30] [--out bench/results/judge_agreement.json]

Simulated: every figure measures this model, no real judge.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from combee_core.judge.calls import JudgeRoles
from combee_core.judge.settings import JudgeSettings
from combee_core.llm.sim_judge import action_of, exact_verdict
from combee_core.models import HeldOutTask, PlaybookEntry, Usage, entries_digest
from combee_core.promote.evaluation import CandidatePlaybook
from combee_core.promote.promotion import PromotionRule
from combee_core.sim.suite import TaskSuite
from combee_core.sim.task_suite import build_suite

MOVES = ("rule", "harmful", "remove")


def suite_task_set(suite: TaskSuite) -> list[HeldOutTask]:
    """The held-out split with expected answers: the action of the task's family's rule."""
    return [HeldOutTask(task_id=t.task_id, input=t.prompt, expected=action_of(suite.family(t.family_id).insight),
                        metadata={"family": t.family_id}) for t in suite.held_out]


def walk(suite: TaskSuite, steps: int, seed: int) -> list[CandidatePlaybook]:
    """Playbooks v0 (empty) .. v<steps>, each 1-3 random moves from the one before."""
    rng = random.Random(seed)
    held: dict[str, set[str]] = {}
    playbooks = [CandidatePlaybook("walk", 0, (), entries_digest([]))]
    for version in range(1, steps + 1):
        for _ in range(rng.randint(1, 3)):
            family = suite.families[rng.randrange(len(suite.families))]
            move = MOVES[rng.randrange(len(MOVES))]
            kinds = held.setdefault(family.family_id, set())
            if move == "remove":
                kinds.clear()
            else:
                kinds.add(move)
        entries = [PlaybookEntry(entry_id=f"{f.section}-{f.family_id}-{kind}", section=f.section,
                                 content=f.insight if kind == "rule" else f.harmful_insight, created_version=version,
                                 updated_version=version)
                   for f in suite.families for kind in sorted(held.get(f.family_id, ()))]
        playbooks.append(CandidatePlaybook("walk", version, tuple(entries), entries_digest(entries)))
    return playbooks


@dataclass
class Tally:
    both_right: int = 0
    judge_only: int = 0
    exact_only: int = 0
    both_wrong: int = 0
    usage: Usage = field(default_factory=Usage)

    @property
    def tasks(self) -> int:
        return self.both_right + self.judge_only + self.exact_only + self.both_wrong

    @property
    def agreement(self) -> float:
        return (self.both_right + self.both_wrong) / max(1, self.tasks)


async def score_walk(playbooks: list[CandidatePlaybook], tasks: list[HeldOutTask], sim_seed: int, tally: Tally
                     ) -> list[tuple[float, float]]:
    """(exact mean, judge mean) per playbook."""
    settings = JudgeSettings(judge_model="combee-sim/judge", agent_model="combee-sim/agent", seed=sim_seed)
    roles = JudgeRoles(settings.llm_config())
    means = []
    for playbook in playbooks:
        text = playbook.render()
        exact_sum = judge_sum = 0.0
        for task in tasks:
            answer = await roles.run_agent(task.input, text)
            verdict = await roles.judge(task, answer.text)
            tally.usage += answer.usage + verdict.usage
            right = exact_verdict(answer.text, task.expected or "")
            judged = verdict.score >= 0.5
            exact_sum += right
            judge_sum += verdict.score
            if right and judged:
                tally.both_right += 1
            elif judged:
                tally.judge_only += 1
            elif right:
                tally.exact_only += 1
            else:
                tally.both_wrong += 1
        means.append((exact_sum / len(tasks), judge_sum / len(tasks)))
    return means


def decisions(means: list[tuple[float, float]], rule: PromotionRule) -> list[tuple[bool, bool]]:
    """(exact promotes, judge promotes) for each step: the candidate against the playbook before it."""
    return [(rule.accepts(means[i][0], means[i - 1][0]), rule.accepts(means[i][1], means[i - 1][1]))
            for i in range(1, len(means))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="simulator seeds (agent, judge)")
    parser.add_argument("--steps", type=int, default=30, help="candidate playbooks in the walk")
    parser.add_argument("--walk-seed", type=int, default=11)
    parser.add_argument("--epsilon", type=float, default=0.0, help="the promotion rule's epsilon (default 0)")
    parser.add_argument("--out", default="bench/results/judge_agreement.json")
    args = parser.parse_args()
    suite = build_suite()
    tasks = suite_task_set(suite)
    playbooks = walk(suite, args.steps, args.walk_seed)
    rule = PromotionRule(epsilon=args.epsilon)
    rows = []
    print(f"{len(tasks)} held-out tasks x {len(playbooks)} playbooks per seed; rule {rule.describe()}")
    print("seed  agreement  both-right  judge-only  exact-only  both-wrong  decisions-agree  calls  cost-usd")
    for seed in args.seeds:
        tally = Tally()
        means = asyncio.run(score_walk(playbooks, tasks, seed, tally))
        decided = decisions(means, rule)
        same = sum(a == b for a, b in decided)
        rows.append({"seed": seed, "tasks": tally.tasks, "agreement": round(tally.agreement, 4),
                     "both_right": tally.both_right, "judge_only": tally.judge_only, "exact_only": tally.exact_only,
                     "both_wrong": tally.both_wrong, "decisions": len(decided), "decisions_agree": same,
                     "exact_promotes": sum(a for a, _ in decided), "judge_promotes": sum(b for _, b in decided),
                     "disagreements": [i + 1 for i, (a, b) in enumerate(decided) if a != b],
                     "means": [[round(e, 4), round(j, 4)] for e, j in means],
                     "calls": tally.usage.calls, "cost_usd": round(tally.usage.cost_usd, 6)})
        print(f"{seed:>4}  {tally.agreement:9.4f}  {tally.both_right:10d}  {tally.judge_only:10d}  "
              f"{tally.exact_only:10d}  {tally.both_wrong:10d}  {same:>7d} / {len(decided):<5d}  "
              f"{tally.usage.calls:5d}  {tally.usage.cost_usd:.4f}")
    total = sum(r["tasks"] for r in rows)
    agree = sum(r["both_right"] + r["both_wrong"] for r in rows) / max(1, total)
    decided_total = sum(r["decisions"] for r in rows)
    same_total = sum(r["decisions_agree"] for r in rows)
    print(f"all   {agree:9.4f}  decisions agree {same_total} / {decided_total}")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"commit": commit, "steps": args.steps, "walk_seed": args.walk_seed,
                                          "epsilon": args.epsilon, "rows": rows, "agreement": round(agree, 4),
                                          "decisions_agree": same_total, "decisions": decided_total}, indent=1))


if __name__ == "__main__":
    main()
