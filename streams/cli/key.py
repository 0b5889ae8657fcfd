"""``combee key new``: a fresh access key scoped to playbooks (docs/serving.md, "Keys"): the secret, shown once,
and the line to store (its digest only) in ``COMBEE_ACCESS_KEYS`` or ``COMBEE_ACCESS_KEYS_FILE``."""

from __future__ import annotations

import argparse
import sys


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    key = subparsers.add_parser("key", help="make an access key scoped to playbooks (serve, MCP, otlp-receiver)")
    actions = key.add_subparsers(dest="action", required=True)
    new = actions.add_parser("new", help="print a new secret (once) and the key line to store (its digest only)")
    new.add_argument("--name", required=True, help="the key's name (said in refusals and logs)")
    new.add_argument("--read", default="", help="playbooks it may read from combee serve, comma-separated, or *")
    new.add_argument("--write", default="", help="playbooks it may write traces of into combee otlp-receiver, "
                     "comma-separated, or *")
    new.set_defaults(handler=cmd_key_new)


def cmd_key_new(args: argparse.Namespace) -> int:
    from combee_core.serve.access_keys import AccessKeyError, digest, new_secret, parse_key_line

    if not args.read and not args.write:
        raise AccessKeyError("a key needs --read and/or --write (playbook ids, comma-separated, or *)")
    secret = new_secret()
    scopes = " ".join(f"{what}={ids}" for what, ids in (("read", args.read), ("write", args.write)) if ids)
    line = f"{args.name} {digest(secret)} {scopes}"
    parse_key_line(line, "the new key")  # the same checks as a stored line
    print(f"secret (give it to the client; it is not stored anywhere): {secret}", file=sys.stderr)
    print(line)
    return 0
