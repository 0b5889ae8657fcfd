"""``combee schemas``: write the JSON Schemas of the wire models, or check them for drift."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    schemas = subparsers.add_parser("schemas", help="write or check the JSON Schemas")
    schemas.add_argument("--dir", default="schemas")
    schemas.add_argument("--check", action="store_true")
    schemas.set_defaults(handler=cmd_schemas)


def cmd_schemas(args: argparse.Namespace) -> int:
    from combee_core.schema_export import schema_drift, write_schemas

    directory = Path(args.dir)
    if args.check:
        drift = schema_drift(directory)
        if drift:
            print(f"schemas out of date: {', '.join(drift)} (run `combee schemas`)", file=sys.stderr)
            return 1
        print("schemas are up to date")
        return 0
    for path in write_schemas(directory):
        print(path)
    return 0
