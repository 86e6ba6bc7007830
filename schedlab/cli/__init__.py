"""The `schedlab` command: solve | bench | replay | record | compare | sweep | report | calibrate | serve.

COMMANDS holds one entry per subcommand: its help line, the function that adds its arguments and
the function that runs it (cli.rounds: solve, bench, serve; cli.replays: replay, record, compare,
sweep, report; cli.calibrate). Every run function imports what it needs, so `schedlab --help`
loads no solver, model library or table.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass

from schedlab import __version__
from schedlab.cli.calibrate import calibrate_arguments, cmd_calibrate
from schedlab.cli.common import fail
from schedlab.cli.replays import (
    cmd_compare,
    cmd_record,
    cmd_replay,
    cmd_report,
    cmd_sweep,
    compare_arguments,
    record_arguments,
    replay_arguments,
    report_arguments,
    sweep_arguments,
)
from schedlab.cli.rounds import bench_arguments, cmd_bench, cmd_serve, cmd_solve, serve_arguments, solve_arguments
from schedlab.errors import SchedlabError

__all__ = ["COMMANDS", "Command", "build_parser", "main"]


@dataclass(frozen=True)
class Command:
    """A subcommand: its help line, what adds its arguments, what runs it (its exit status)."""

    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


COMMANDS: dict[str, Command] = {
    "solve": Command("solve one round given as JSON; the result JSON goes to stdout",
        solve_arguments, cmd_solve),
    "bench": Command("solve random rounds from the shipped profiles and report latency",
        bench_arguments, cmd_bench),
    "replay": Command("replay a workload round by round under a policy",
        replay_arguments, cmd_replay),
    "record": Command("write the rounds a policy solves in a replay (JSON lines, the round schema)",
        record_arguments, cmd_record),
    "compare": Command("solve recorded rounds with each solver (and formulation); per variant a summary",
        compare_arguments, cmd_compare),
    "sweep": Command("run a grid of replays from a TOML config; resumable",
        sweep_arguments, cmd_sweep),
    "serve": Command("answer rounds over HTTP (POST /v1/solve) until SIGTERM; see schedlab/serve.py",
        serve_arguments, cmd_serve),
    "report": Command("tables and figures from a sweep's results folder",
        report_arguments, cmd_report),
    "calibrate": Command("measure models with PyTorch and write a throughput table, or fit one",
        calibrate_arguments, cmd_calibrate),
}


def build_parser() -> argparse.ArgumentParser:
    """The parser of `schedlab` and of every subcommand in COMMANDS."""
    parser = argparse.ArgumentParser(prog="schedlab", description="GPU-cluster scheduling rounds as optimization models")
    parser.add_argument("--version", action="version", version=f"schedlab {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, command in COMMANDS.items():
        subparser = sub.add_parser(name, help=command.help)
        command.add_arguments(subparser)
        subparser.set_defaults(func=command.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run `schedlab` with `argv` (default: the command line); its exit status."""
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except SchedlabError as exc:
        return fail(str(exc))
    except BrokenPipeError:  # the reader (e.g. `| head`) left: not an error of ours
        sys.stderr.close()
        return 0

