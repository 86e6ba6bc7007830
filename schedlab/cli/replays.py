"""The replay commands: replay (a trace under a policy), record and compare (A/B on recorded rounds),
sweep (a grid of replays) and report (its tables and figures)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from schedlab.cli.common import COUNT, POSITIVE_S, fail, number

__all__ = ["compare_arguments", "record_arguments", "replay_arguments", "report_arguments", "cmd_compare", "cmd_record",
           "cmd_replay", "cmd_report", "cmd_sweep", "sweep_arguments"]


def replay_arguments(parser: argparse.ArgumentParser) -> None:
    """The trace (one of four), the world and its overrides, the policy, the outputs."""
    trace = parser.add_mutually_exclusive_group(required=True)
    trace.add_argument("--workload", help="Pollux-format CSV, or a shipped name (workload-1..8)")
    trace.add_argument("--sia-philly", help="a Sia-Philly trace (CSV, or a shipped name workload-1..8)")
    trace.add_argument("--gavel-trace", metavar="PATH",
                       help="a Gavel trace (.trace file, or a shipped msr name such as 0e4a51); with --world gavel")
    trace.add_argument("--trace", choices=["philly"],
                       help="the shipped Philly trace at its real timestamps (82,247 jobs over 109 days)")
    parser.add_argument("--start-day", type=number(float, 0.0), default=0.0, help="with --trace: the window's first day")
    parser.add_argument("--days", type=number(float, 0.0, low_open=True), default=None,
                        help="with --trace: the window's length (default: to the end)")
    parser.add_argument("--world", default="pollux",
                        help="the simulated world (sim.world.WORLDS): pollux (the Pollux artifact's), pal (PAL's "
                             "simulator), variability (pollux on PAL's measured GPUs and 4 racks), gavel (Gavel's "
                             "simulator: 36 V100 + 36 P100 + 36 K80)")
    parser.add_argument("--policy", required=True,
                        help="a policy of the registry, e.g. pollux, icefrog, tiresias, ones (an unknown name lists all)")
    parser.add_argument("--nodes", type=COUNT, default=None, help="default: the world's (16)")
    parser.add_argument("--gpus-per-node", type=COUNT, default=None, help="default: the world's (4)")
    _cluster_argument(parser)
    parser.add_argument("--round-s", type=POSITIVE_S, default=None, help="scheduling interval in seconds (default: the world's)")
    parser.add_argument("--restart-delay-s", type=number(float, 0.0, 1e9), default=None,
                        help="seconds without progress after each (re)start (default: the world's)")
    parser.add_argument("--model", choices=["online", "oracle"], default=None,
                        help="throughput model the policy sees (default: the policy's own)")
    parser.add_argument("--out", default=None, help="folder for jobs.csv, rounds.csv and summary.json")
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def cmd_replay(args: argparse.Namespace) -> int:
    """Replay a trace under a policy (replay_api.setup); print the summary, write the outputs."""
    from tqdm import tqdm

    from schedlab.io import json_text
    from schedlab.replay_api import setup
    from schedlab.sim.engine import check_out_dir, write_outputs
    from schedlab.sim.world import WORLDS

    if args.world not in WORLDS:
        return fail(f"--world {args.world!r}: use one of {', '.join(WORLDS)}")
    options = {k: v for k, v in {"num_nodes": args.nodes, "gpus_per_node": args.gpus_per_node,
                                 "round_s": args.round_s, "restart_delay_s": args.restart_delay_s,
                                 "throughput_model": args.model}.items() if v is not None}
    if args.cluster is not None and (args.nodes or args.gpus_per_node):
        return fail("--cluster's pools hold the nodes: drop --nodes and --gpus-per-node")
    if args.out:
        check_out_dir(args.out)
    run = setup(_trace_spec(args), args.policy, args.world, cluster=_pools(args), **options)
    with tqdm(total=len(run.jobs), unit="job", disable=args.quiet, file=sys.stderr,
              desc=f"{args.policy} on {run.title}") as bar:
        def on_round(now_s: float, done: int) -> None:
            bar.update(done - bar.n)
            bar.set_postfix_str(f"t={now_s / 3600:.1f} h", refresh=False)

        result = run.run(on_round)
    if args.out:
        write_outputs(result, args.out)
    if args.json:
        print(json_text(result.summary))
    else:
        for k, v in result.summary.items():
            print(f"{k:18s} {v:.4g}" if isinstance(v, float) else f"{k:18s} {v}")
    return 0


def _cluster_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cluster", default=None,
                        help="node pools of GPU types instead of --nodes/--gpus-per-node: TYPE:NODESxGPUS joined by "
                             "commas, e.g. t4:6x4,v100:5x4,k80:5x4, or Gavel's V100:P100:K80 GPU counts, e.g. 36:36:36 "
                             "(the world's racks and variability apply over every pool)")


def _pools(args: argparse.Namespace) -> Any:
    """--cluster's node pools (clusters.parse_pools), None without it."""
    from schedlab.clusters import parse_pools

    return parse_pools(args.cluster) if args.cluster is not None else None


def _trace_spec(args: argparse.Namespace) -> Any:
    """The trace the replay flags name (one of them is set: argparse's exclusive group)."""
    from schedlab.trace_specs import GavelTrace, PhillyTrace, SiaPhillyTrace, WorkloadTrace

    flags = {"workload": lambda: WorkloadTrace(args.workload), "sia_philly": lambda: SiaPhillyTrace(args.sia_philly),
             "trace": lambda: PhillyTrace(args.start_day, args.days), "gavel_trace": lambda: GavelTrace(args.gavel_trace)}
    return next(spec() for flag, spec in flags.items() if getattr(args, flag))


def record_arguments(parser: argparse.ArgumentParser) -> None:
    """The workload, the round-model policy, how many rounds, the file."""
    parser.add_argument("--workload", required=True, help="Pollux-format CSV, or a shipped name (workload-1..8)")
    parser.add_argument("--policy", default="pollux", help="a round-model policy: pollux, sia, joint, icefrog, static_freeze")
    parser.add_argument("--rounds", type=COUNT, default=50, help="the first this many rounds with jobs")
    parser.add_argument("--nodes", type=COUNT, default=None, help="default: the world's (16)")
    _cluster_argument(parser)
    parser.add_argument("--out", required=True, help="the JSON-lines file to write (not a file of a sweep's or "
                                                      "replay's folder)")


def cmd_record(args: argparse.Namespace) -> int:
    """Replay a workload under a round-model policy, writing the first rounds it solves."""
    import numpy as np

    from schedlab.io.outputs import check_out_file
    from schedlab.policies import make_policy
    from schedlab.sim.engine import replay
    from schedlab.sim.world import WORLDS
    from schedlab.trace_specs import WorkloadTrace
    from schedlab.workbench import recorder

    check_out_file(args.out)
    if args.cluster is not None and args.nodes:
        return fail("--cluster's pools hold the nodes: drop --nodes")
    shape = {"pools": _pools(args)} if args.cluster is not None else {"num_nodes": args.nodes} if args.nodes else {}
    config = WORLDS["pollux"].with_options(**shape)
    jobs = WorkloadTrace(args.workload).replay_jobs(config, np.random.default_rng(0))
    try:
        sink = open(args.out, "w")
    except OSError as exc:
        return fail(f"--out {args.out}: cannot write it ({exc.strerror})")
    with sink:
        rec = recorder(make_policy(args.policy), sink, args.rounds)
        replay(jobs, rec, config)
    print(f"{rec.written} rounds of {args.policy} on {args.workload} -> {args.out}", file=sys.stderr)
    return 0


def compare_arguments(parser: argparse.ArgumentParser) -> None:
    """The recorded rounds, the variants, the table's format."""
    parser.add_argument("rounds_jsonl", help="rounds, one JSON object per line (schedlab record)")
    parser.add_argument("--solver", action="append", default=[], help="a registry solver; repeat (the first is the reference)")
    parser.add_argument("--formulation", action="append", default=[], help="a formulation; repeat (default: the round's own)")
    parser.add_argument("--customize", default=None, metavar="MODULE:FUNCTION",
                        help="change every round's Pyomo model with this function (Pyomo solvers only)")
    parser.add_argument("--time-limit", type=POSITIVE_S, default=None, help="each solve's time_limit_s (default: the round's)")
    parser.add_argument("--format", choices=["md", "csv", "latex"], default="md")
    parser.add_argument("--per-round", action="store_true", help="also print one row per round and variant")


def cmd_compare(args: argparse.Namespace) -> int:
    """Solve recorded rounds with every variant; print the per-variant summary."""
    from schedlab.workbench import compare, load_customize, read_rounds, render, summary, variants

    rounds = list(read_rounds(args.rounds_jsonl))
    if not rounds:
        return fail(f"{args.rounds_jsonl}: no rounds")
    customize = load_customize(args.customize) if args.customize else None
    per_round = compare(rounds, variants(args.solver or ["portfolio"], args.formulation), args.time_limit, customize)
    if args.per_round:
        print(render(per_round, args.format))
        print()
    print(render(summary(per_round), args.format))
    return 0


def sweep_arguments(parser: argparse.ArgumentParser) -> None:
    """The config, the engine (local or Dask) and its TLS, the results folder."""
    parser.add_argument("config", help="sweep config (TOML), e.g. experiments/configs/pollux_artifact.toml")
    parser.add_argument("--engine", choices=["local", "dask"], default="local",
                        help="local processes (default) or Dask distributed (pip install 'schedlab[dask]')")
    parser.add_argument("--address", default=None,
                        help="Dask scheduler, tls://HOST:PORT (default: a LocalCluster); plain tcp:// only on loopback "
                             "or with --insecure")
    parser.add_argument("--tls-ca-file", default=None, help="with --address tls://: the CA that signed the scheduler")
    parser.add_argument("--tls-cert", default=None, help="with --address tls://: this client's certificate")
    parser.add_argument("--tls-key", default=None, help="with --address tls://: this client's private key")
    parser.add_argument("--insecure", action="store_true",
                        help="allow a remote tcp:// scheduler (its answerers run code here: trusted networks only)")
    parser.add_argument("--workers", type=COUNT, default=None, help="processes or LocalCluster workers (default: CPU count)")
    parser.add_argument("--out", default=None,
                        help="results folder (default: results/<sweep name>): new, empty or this config's (it resumes)")
    parser.add_argument("--force", action="store_true",
                        help="run into an --out holding another config's results: this config replaces its "
                             "sweep.toml, and the cells the two share are reused")
    parser.add_argument("--report", action="store_true", help="then print the table and write the figures")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def cmd_sweep(args: argparse.Namespace) -> int:
    """Run a sweep's cells not yet stored (resumable); with --report, print its table."""
    from schedlab.sweep import load_sweep, run_sweep
    from schedlab.sweep.run import Remote

    sweep = load_sweep(args.config)
    out = args.out or f"results/{sweep.name}"
    remote = Remote(args.address, args.tls_ca_file, args.tls_cert, args.tls_key, args.insecure) if args.address else None
    records, failed = run_sweep(sweep, out, args.engine, args.workers, remote, progress=not args.quiet,
                                force=args.force)
    print(f"{len(records)}/{len(sweep.cells)} cells done in {out}/cells"
          + (f", {len(failed)} failed (tracebacks in {out}/cells/*.error.json)" if failed else ""))
    if args.report:
        print(_report(out, "md", True))
    return 1 if failed else 0


def report_arguments(parser: argparse.ArgumentParser) -> None:
    """The results folder, the format, the baseline and metric."""
    parser.add_argument("folder", help="the sweep's --out folder")
    parser.add_argument("--format", choices=["md", "csv", "latex"], default="md")
    parser.add_argument("--figures", action="store_true", help="write figures/*.png and *.pdf")
    parser.add_argument("--baseline", default=None, help="policy label to compare against (default: the config's)")
    parser.add_argument("--metric", default=None, help="summary metric (default: the config's, mean_jct_s)")


def cmd_report(args: argparse.Namespace) -> int:
    """Print a sweep's table (and write its figures)."""
    print(_report(args.folder, args.format, args.figures, args.baseline, args.metric))
    return 0


def _report(folder: str, fmt: str, figures: bool, baseline: str | None = None, metric: str | None = None) -> str:
    from schedlab.sweep import report

    return report(folder, fmt, figures, baseline, metric)
