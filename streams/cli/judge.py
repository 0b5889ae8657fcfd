"""``combee judge``: the built-in LLM judge evaluator (``combee_client.judge``). It answers the promoter's evaluation
requests for held-out task sets with an expected answer or a rubric: the agent model runs each task with the
candidate playbook, the judge model judges the answer (docs/operations.md, "Gating on your own tasks with the LLM
judge"). Run workers without the ``evaluate`` stage so that it answers, not the built-in simulator."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

from streams.cli.flags import add_common, settings_from_args
from streams.cli.running import broker_for

EVALUATOR_NAME = "llm-judge"
"""The default ``--name`` (``combee_core.judge.score.EVALUATOR_NAME``; not imported: ``--help`` loads no LLM layer)."""


def add_parser(subparsers) -> None:
    judge = subparsers.add_parser("judge", help="the LLM judge evaluator: an agent model answers each held-out task "
                                  "with the candidate playbook, a judge model scores the answer")
    add_common(judge, run=False)
    judge.add_argument("--judge-model", help="litellm model that judges (env COMBEE_JUDGE_MODEL)")
    judge.add_argument("--agent-model", help="litellm model of your agent (env COMBEE_JUDGE_AGENT_MODEL)")
    judge.add_argument("--judge-api-base", dest="api_base", help="the judge model's server (COMBEE_JUDGE_API_BASE)")
    judge.add_argument("--agent-api-base", help="the agent model's server (COMBEE_JUDGE_AGENT_API_BASE)")
    judge.add_argument("--timeout", dest="timeout_s", type=float, help="seconds per LLM call (default 120)")
    judge.add_argument("--max-tokens", type=int, help="cap on each call's answer")
    judge.add_argument("--name", default=EVALUATOR_NAME, help=f"evaluator name and consumer group (default "
                       f"{EVALUATOR_NAME}); processes of one name share the requests")
    judge.add_argument("--concurrency", type=int, default=4, help="tasks judged at once per process (default 4)")
    judge.add_argument("--record-file", help="also append every LLM call to this JSONL file (for replay)")
    judge.add_argument("--replay-file", help="answer every LLM call from this JSONL call record, never the models")
    judge.set_defaults(handler=cmd_judge)


async def cmd_judge(args: argparse.Namespace) -> int:
    from combee_client.judge import JudgeEvaluator  # aiokafka and the LLM layer: only when the command runs
    from combee_core.judge.settings import JudgeSettings

    overrides = {key: getattr(args, key) for key in ("judge_model", "agent_model", "api_base", "agent_api_base",
                                                     "timeout_s", "max_tokens")}
    judge_settings = JudgeSettings.load(overrides)  # one line per bad value, before the broker is asked
    if not args.replay_file:
        judge_settings.check_routable()
    settings = settings_from_args(args)
    async with broker_for(settings, embedded=args.embedded) as (bootstrap, _profile):
        judge = JudgeEvaluator(judge_settings, name=args.name, record_file=args.record_file,
                               replay_file=args.replay_file, settings=settings, bootstrap=bootstrap,
                               concurrency=args.concurrency)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, judge.stop)
        print(f"judging with {judge.judge.evaluator_model} as evaluator {args.name!r}; Ctrl-C stops",
              file=sys.stderr)
        metrics = await judge.run()
    print(f"{metrics.line()}; {judge.judge.usage.line()}", file=sys.stderr)
    return 0
