"""``remat``: capture, solve, sweep and run rematerialization schedules from the shell."""
from __future__ import annotations

import argparse
import sys

from remat.errors import RematError


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        parser.print_help()
        return 2
    try:
        return int(args.run(args) or 0)
    except (RematError, ValueError) as exc:  # bad input: say what, no traceback
        print(f"remat: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("remat: interrupted", file=sys.stderr)
        return 130


def build_parser() -> argparse.ArgumentParser:
    from remat.cli import commands

    parser = argparse.ArgumentParser(
        prog="remat", description="Optimal tensor rematerialization for PyTorch training steps.")
    sub = parser.add_subparsers(title="commands", metavar="COMMAND")
    for register in commands.REGISTRARS:
        register(sub)
    return parser


if __name__ == "__main__":
    sys.exit(main())
