"""``combee promote PLAYBOOK VERSION`` and ``combee rollback PLAYBOOK [--to VERSION]``: an operator's decision on
the ``promoted`` topic, recorded with who and why (``combee_core.promote.promotion.operator_decision``)."""

from __future__ import annotations

import argparse
import getpass
import socket

from combee_core.log_order import valid_versions
from combee_core.models import PlaybookVersion, PromotionDecision, utc_now
from combee_core.promote.promotion import (
    PromotionError,
    PromotionLedger,
    PromotionRule,
    load_ledger,
    operator_decision,
    rollback_target,
)
from combee_core.settings import CombeeSettings
from combee_core.topology import Topic
from streams.broker.profile import BrokerProfile
from streams.cli.flags import add_common, settings_from_args
from streams.cli.running import broker_for
from streams.topology.readable import readable

WRITE_ATTEMPTS = 5


def known_versions(versions: dict[int, PlaybookVersion]) -> str:
    """What versions a playbook has, for the error naming one it has not."""
    if not versions:
        return "it has no versions on the playbook topic: check the id and --prefix; 0 is the empty playbook"
    return f"versions 1..{max(versions)}, and 0 for the empty playbook"


def operator_name() -> str:
    """user@host of whoever runs the command."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


async def read_ledger(settings: CombeeSettings, bootstrap: str, profile: BrokerProfile) -> PromotionLedger:
    from streams.topology.topic_reader import read_topic  # here: `import streams.cli` must not load aiokafka

    records = await read_topic(bootstrap, profile, settings.topic(Topic.PROMOTED))
    return load_ledger(readable(records, PromotionDecision))


async def operator_act(settings: CombeeSettings, bootstrap: str, profile: BrokerProfile, playbook_id: str,
                       action: str, version: int | None, *, why: str = "", by: str | None = None) -> PromotionDecision:
    """Write an operator's ``operator-promote`` (of ``version``) or ``rollback`` (to ``version``, default the
    version served before; with promotion off, the parent of the version agents run) and return it once the log
    shows it counts (retried when the promoter took its id)."""
    from combee_core.guard.rule import served_without_promotion  # the playbook and numpy: only to act
    from streams.topology.kafka_clients import start_producer
    from streams.topology.topic_reader import read_topic

    by = by or operator_name()
    rule = PromotionRule(epsilon=settings.promotion_epsilon)
    versions = {v.version: v for v in valid_versions(
        readable(await read_topic(bootstrap, profile, settings.topic(Topic.PLAYBOOK)), PlaybookVersion))
        if v.playbook_id == playbook_id}
    producer = await start_producer(bootstrap, profile)
    try:
        for _ in range(WRITE_ATTEMPTS):
            ledger = await read_ledger(settings, bootstrap, profile)
            promotes = settings.promotion or ledger.last_decided(playbook_id) > 0  # or the promoter has decided
            newest = None if promotes else max(versions, default=0)
            running = None if newest is None else served_without_promotion(  # what agents run, promotion off
                ledger, playbook_id, {v: pv.parent_version for v, pv in versions.items()}, newest)
            target = version if version is not None else (
                versions[running].parent_version if running else rollback_target(ledger, playbook_id))
            if target != 0 and target not in versions:
                raise PromotionError(f"{playbook_id} has no version {target} ({known_versions(versions)})")
            decision = operator_decision(ledger, action, versions.get(target), playbook_id=playbook_id, by=by,
                                         why=why, rule=rule, now=utc_now(), running=running, newest=newest)
            await producer.send_and_wait(settings.topic(Topic.PROMOTED), decision.to_json_bytes(),
                                         key=playbook_id.encode())
            if await _counts(settings, bootstrap, profile, decision):
                return decision
            # another writer (the promoter) took the id first: read again and retry with the next id
    finally:
        await producer.stop()
    raise PromotionError(f"{playbook_id}: another writer took every decision id tried ({WRITE_ATTEMPTS} attempts)")


async def _counts(settings: CombeeSettings, bootstrap: str, profile: BrokerProfile,
                  decision: PromotionDecision) -> bool:
    """Whether the record that counts under ``decision``'s id is this one (compared without the time)."""
    from streams.topology.topic_reader import read_topic

    ledger = PromotionLedger()
    for other in readable(await read_topic(bootstrap, profile, settings.topic(Topic.PROMOTED)), PromotionDecision):
        if ledger.apply(other) and (other.playbook_id, other.decision_id) == (decision.playbook_id,
                                                                              decision.decision_id):
            return other.decision_hash() == decision.decision_hash()
    return False


def add_parser(subparsers) -> None:
    promote = subparsers.add_parser("promote", help="serve a version to agents now, and resume automatic promotion")
    add_common(promote, run=False)
    promote.add_argument("playbook", help="playbook id")
    promote.add_argument("version", type=int, help="version to serve (0 = the empty playbook)")
    promote.add_argument("--reason", default="", help="why (recorded with the decision)")
    promote.set_defaults(handler=cmd_promote)

    rollback = subparsers.add_parser("rollback", help="serve an earlier version now, and pause automatic promotion")
    add_common(rollback, run=False)
    rollback.add_argument("playbook", help="playbook id")
    rollback.add_argument("--to", dest="version", type=int, help="version to serve (default: the one served before)")
    rollback.add_argument("--reason", default="", help="why (recorded with the decision)")
    rollback.set_defaults(handler=cmd_rollback)


async def _act(args: argparse.Namespace, action: str) -> int:
    settings = settings_from_args(args)
    async with broker_for(settings, embedded=args.embedded) as (bootstrap, profile):
        # a PromotionError is one line and exit 2, as every error a user can fix (streams.cli.main)
        decision = await operator_act(settings, bootstrap, profile, args.playbook, action, args.version,
                                      why=args.reason)
    paused = "; automatic promotion paused until `combee promote`" if decision.paused else ""
    print(f"{decision.playbook_id}: serving v{decision.served_version} (was v{decision.previous_version}), decision "
          f"{decision.decision_id} by {decision.by}{paused}")
    return 0


async def cmd_promote(args: argparse.Namespace) -> int:
    return await _act(args, "operator-promote")


async def cmd_rollback(args: argparse.Namespace) -> int:
    return await _act(args, "rollback")
