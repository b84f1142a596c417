"""The `perfagent` command: one module per command or family, each its flags, one call into the package that
does the work, and the printing. An error perfagent raises on purpose (agent/errors.py draws them) becomes one
`error:` line and its exit code in one place, at the top (`guarded`)."""

from __future__ import annotations

import argparse
import sys

from rich.console import Console

from agent import __version__
from agent.cli import batch, check, export, lint, review, run, tasks
from agent.options import empty_flags
from agent.run import UserError, guarded

COMMANDS = (run, lint, tasks, check, batch, review, export)  # each adds its parsers, in the order the README lists


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="perfagent",
                                description="Propose performance edits, prove them safe, measure them, "
                                            "report the cost.")
    p.add_argument("--version", action="version", version=f"perfagent {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.add(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:2] == ["tasks", "import"]:  # a word `tasks PATH` cannot take as its optional positional
        argv = [tasks.TASKS_IMPORT, *argv[2:]]
    parser = build_parser()
    args = parser.parse_args(argv)
    out = Console(stderr=False, emoji=False)
    return guarded(lambda: _call(parser, args, out))


def _call(parser: argparse.ArgumentParser, args: argparse.Namespace, out: Console) -> int:
    """The command, once no argument is empty: `--models "$M"` with M unset is a mistake, not the default."""
    empty = empty_flags(parser, args)
    if empty:
        raise UserError(f"{empty[0]} is empty (an unset shell variable?): give it a value, or leave it out")
    return args.func(args, out)
