"""The `schedlab` command: solve | bench | replay | record | compare | sweep | report | calibrate | serve."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
from typing import Any

from schedlab import __version__
from schedlab.errors import ConfigError, SchedlabError
from schedlab.state import Settings


def _cmd_solve(args: argparse.Namespace) -> int:
    from schedlab.api import solve_round
    from schedlab.io import load_json, round_result_to_dict

    if args.stream:
        return _solve_stream(args)
    try:
        with open(args.round_json, "rb") if args.round_json != "-" else sys.stdin.buffer as f:
            data = f.read()
    except OSError as exc:
        return _fail(f"cannot read {args.round_json}: {exc.strerror}")
    raw = load_json(data, args.round_json)
    if args.write:
        _write_model(raw, args.write)
    with _solver_log(args):
        result = solve_round(raw, solver=args.solver, time_limit_s=args.time_limit,
                             solver_options=_solver_options(args.solver_option))
    json.dump(round_result_to_dict(result), sys.stdout, indent=2 if args.pretty else None)
    sys.stdout.write("\n")
    return 0


def _write_model(raw: Any, path: str) -> None:
    """The round's Pyomo model to an LP or MPS file, with its readable names (x(job_option))."""
    from schedlab.api import build_model

    if not path.endswith((".lp", ".mps")):
        raise ConfigError(f"--write {path}: name an .lp or .mps file")
    try:
        build_model(raw).write(path, io_options={"symbolic_solver_labels": True})
    except OSError as exc:
        raise ConfigError(f"--write {path}: cannot write it ({exc.strerror})") from None


def _solver_options(pairs: list[str]) -> dict[str, Any] | None:
    """--solver-option NAME=VALUE pairs as settings.solver_options: a value that reads as a JSON
    number or true/false is one, anything else is a string (checked with the round's fields)."""
    options: dict[str, Any] = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        if not sep or not name:
            raise ConfigError(f"--solver-option {pair}: give NAME=VALUE, e.g. --solver-option mip_rel_gap=1e-6")
        try:
            value = json.loads(text)
        except ValueError:
            value = text
        options[name] = value if isinstance(value, (bool, int, float)) else text
    return options or None


def _solver_log(args: argparse.Namespace) -> contextlib.AbstractContextManager:
    from schedlab.solvers.log import solver_log_to_stderr

    return solver_log_to_stderr() if args.solver_log else contextlib.nullcontext()


def _solve_stream(args: argparse.Namespace) -> int:
    """One round per line in (JSON lines), one result line out per round, in order, flushed as
    each is solved; a bad line gets an error line and the stream goes on. Blank lines are skipped."""
    from schedlab.api import solve_round
    from schedlab.io import error_to_dict, load_json, round_result_to_dict

    try:
        source = open(args.round_json, "rb") if args.round_json != "-" else sys.stdin.buffer
    except OSError as exc:
        return _fail(f"cannot read {args.round_json}: {exc.strerror}")
    with source:
        for number, line in enumerate(source, start=1):
            if not line.strip():
                continue
            try:
                raw = load_json(line, f"line {number}")
                with _solver_log(args):
                    out = round_result_to_dict(solve_round(raw, solver=args.solver, time_limit_s=args.time_limit,
                                                           solver_options=_solver_options(args.solver_option)))
            except SchedlabError as exc:
                out = error_to_dict(exc)
            sys.stdout.write(json.dumps(out) + "\n")
            sys.stdout.flush()
    return 0


def _cmd_bench(args: argparse.Namespace) -> int:
    from schedlab.bench import run_bench
    from schedlab.io import json_text

    if args.scale:
        return _bench_scale(args)
    p = -math.inf if args.p in ("-inf", "max-min") else float(args.p)
    out = run_bench(args.gpus, args.jobs, args.rounds, solver=args.solver, seed=args.seed, p=p,
                    time_limit_s=args.time_limit, freeze_fraction=args.freeze, formulation=args.formulation,
                    racks=args.racks, variability=args.variability)
    if args.json:
        print(json_text(out))
    else:
        for k, v in out.items():
            print(f"{k:14s} {v}")
    return 0


def _bench_scale(args: argparse.Namespace) -> int:
    from schedlab.bench import SCALE_GPUS, run_scale
    from schedlab.io import json_text

    sizes = tuple(g for g in SCALE_GPUS if g <= args.max_gpus)
    rows = run_scale(sizes, seed=args.seed, time_limit_s=args.time_limit)
    if not args.json:
        print(f"{'GPUs':>7} {'jobs':>6} {'rounds':>6} {'parts':>5} {'options p50':>11} {'build p50':>10} {'solve p50':>10} "
              f"{'total p50':>10} {'total p95':>10} {'gap vs LP':>10} {'peak MB':>8}  statuses")
        for r in rows:
            print(f"{r['gpus']:>7,} {r['jobs']:>6,} {r['rounds']:>6} {r['partitions']:>5} "
                  f"{r['options_p50_ms']:>9.0f}ms {r['build_p50_ms']:>8.0f}ms "
                  f"{r['solve_p50_ms']:>8.0f}ms {r['total_p50_ms']:>8.0f}ms {r['total_p95_ms']:>8.0f}ms "
                  f"{r['gap_vs_lp_max']:>10.1e} {r['peak_mb']:>8.0f}  {r['status_counts']}")
    print(json_text({"scale": rows}))
    return 0


def _cmd_replay(args: argparse.Namespace) -> int:
    from dataclasses import replace

    import numpy as np
    from tqdm import tqdm

    from schedlab.io import json_text
    from schedlab.policies import make_policy
    from schedlab.replay.engine import check_out_dir, replay, write_outputs
    from schedlab.replay.world import WORLDS

    if args.world not in WORLDS:
        return _fail(f"--world {args.world!r}: use one of {', '.join(WORLDS)}")
    world = WORLDS[args.world]
    overrides = {k: v for k, v in {"num_nodes": args.nodes, "gpus_per_node": args.gpus_per_node,
                                   "round_s": args.round_s, "restart_delay_s": args.restart_delay_s,
                                   "throughput_model": args.model}.items() if v is not None}
    config = world.with_options(**overrides)
    if args.out:
        check_out_dir(args.out)
    spec = _trace_spec(args)
    jobs = spec.replay_jobs(config, np.random.default_rng(0))
    config = replace(config, horizon_s=spec.horizon_s(jobs, config))
    policy = make_policy(args.policy)
    with tqdm(total=len(jobs), unit="job", disable=args.quiet, file=sys.stderr,
              desc=f"{args.policy} on {spec.title}") as bar:
        def on_round(now_s: float, done: int) -> None:
            bar.update(done - bar.n)
            bar.set_postfix_str(f"t={now_s / 3600:.1f} h", refresh=False)

        result = replay(jobs, policy, config, on_round=on_round)
    if args.out:
        write_outputs(result, args.out)
    if args.json:
        print(json_text(result.summary))
    else:
        for k, v in result.summary.items():
            print(f"{k:18s} {v:.4g}" if isinstance(v, float) else f"{k:18s} {v}")
    return 0


def _trace_spec(args: argparse.Namespace) -> Any:
    """The trace the replay flags name (one of them is set: argparse's exclusive group)."""
    from schedlab.trace_specs import PhillyTrace, SiaPhillyTrace, WorkloadTrace

    flags = {"workload": lambda: WorkloadTrace(args.workload), "sia_philly": lambda: SiaPhillyTrace(args.sia_philly),
             "trace": lambda: PhillyTrace(args.start_day, args.days)}
    return next(spec() for flag, spec in flags.items() if getattr(args, flag))


def _cmd_sweep(args: argparse.Namespace) -> int:
    from schedlab.sweep import load_sweep, run_sweep
    from schedlab.sweep.run import Remote

    sweep = load_sweep(args.config)
    out = args.out or f"results/{sweep.name}"
    remote = Remote(args.address, args.tls_ca_file, args.tls_cert, args.tls_key, args.insecure) if args.address else None
    records, failed = run_sweep(sweep, out, args.engine, args.workers, remote, progress=not args.quiet)
    print(f"{len(records)}/{len(sweep.cells)} cells done in {out}/cells"
          + (f", {len(failed)} failed (tracebacks in {out}/cells/*.error.json)" if failed else ""))
    if args.report:
        print(_report(out, "md", True))
    return 1 if failed else 0


def _cmd_serve(args: argparse.Namespace) -> int:
    try:
        from schedlab.serve import ServeConfig, serve
    except ImportError as exc:
        return _fail(f"serve needs the serve extra ({exc.name} is missing): pip install 'schedlab[serve]'")
    from schedlab.solvers.registry import SOLVERS, array_solver_names

    unknown = [s for s in args.allow_solver if s not in SOLVERS]
    if unknown:
        return _fail(f"--allow-solver {unknown[0]}: not in the registry; use one of {', '.join(SOLVERS)}")
    workers = args.workers if args.workers is not None else ServeConfig().workers
    serve(ServeConfig(workers, args.queue, args.max_time_limit, args.max_body_mb * 2**20,
                      allow_solvers=(*array_solver_names(), *args.allow_solver),
                      allow_solver_options=args.allow_solver_options), args.host, args.port)
    return 0


def _cmd_record(args: argparse.Namespace) -> int:
    import numpy as np

    from schedlab.policies import make_policy
    from schedlab.replay.engine import replay
    from schedlab.replay.world import WORLDS
    from schedlab.trace_specs import WorkloadTrace
    from schedlab.workbench import recorder

    config = WORLDS["pollux"].with_options(**({"num_nodes": args.nodes} if args.nodes else {}))
    jobs = WorkloadTrace(args.workload).replay_jobs(config, np.random.default_rng(0))
    try:
        sink = open(args.out, "w")
    except OSError as exc:
        return _fail(f"--out {args.out}: cannot write it ({exc.strerror})")
    with sink:
        rec = recorder(make_policy(args.policy), sink, args.rounds)
        replay(jobs, rec, config)
    print(f"{rec.written} rounds of {args.policy} on {args.workload} -> {args.out}", file=sys.stderr)
    return 0


def _cmd_compare(args: argparse.Namespace) -> int:
    from schedlab.workbench import compare, load_customize, read_rounds, render, summary, variants

    rounds = list(read_rounds(args.rounds_jsonl))
    if not rounds:
        return _fail(f"{args.rounds_jsonl}: no rounds")
    customize = load_customize(args.customize) if args.customize else None
    per_round = compare(rounds, variants(args.solver or ["portfolio"], args.formulation), args.time_limit, customize)
    if args.per_round:
        print(render(per_round, args.format))
        print()
    print(render(summary(per_round), args.format))
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    print(_report(args.folder, args.format, args.figures, args.baseline, args.metric))
    return 0


def _report(folder: str, fmt: str, figures: bool, baseline: str | None = None, metric: str | None = None) -> str:
    from schedlab.sweep import report

    return report(folder, fmt, figures, baseline, metric)


def _fail(message: str) -> int:
    print(f"schedlab: error: {message}", file=sys.stderr)
    return 2


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from schedlab.calibrate.table import AllReduceModel, fit_table, read_table, table_frame, write_table
    from schedlab.io import json_text

    if args.fit:
        try:
            fits = fit_table(read_table(args.fit))
        except (OSError, ValueError) as exc:
            return _fail(f"--fit {args.fit}: {exc}")
        if not args.json:
            for f in fits:
                print(f"{f.model:12s} {f.gpu_type:24s} points {f.points:3d}  step-time RMSLE {f.rmsle:.4f}")
        else:
            print(json_text({f.model: {"gpu_type": f.gpu_type, "rmsle": f.rmsle, "points": f.points,
                                        "throughput_params": {f.gpu_type: f.params.__dict__}} for f in fits}))
        return 0
    if not args.model or not args.out:
        return _fail("calibrate needs --model (one or more) and --out, or --fit TABLE.csv")
    try:
        from schedlab.calibrate.harness import measure
        from schedlab.calibrate.zoo import build
    except ImportError as exc:
        return _fail(f"calibrate needs PyTorch ({exc.name} missing): pip install 'schedlab[calibrate]'")
    try:
        sizes = [int(b) for b in args.batch_sizes.split(",")]
    except ValueError:
        return _fail(f"--batch-sizes must be comma-separated integers, got {args.batch_sizes!r}")
    if args.device.startswith("cuda"):
        import torch
        if not torch.cuda.is_available():
            return _fail("--device cuda: no CUDA device is visible; use --device cpu")
    measurements = []
    for name in args.model:
        try:
            model = build(name)
        except KeyError as exc:
            return _fail(str(exc.args[0]))
        got = measure(model, sizes, args.device, args.warmup, args.steps, frozen_groups=args.frozen_groups)
        for m in got:
            print(f"{m.model:12s} bsz {m.local_bsz:5d} frozen {m.frozen_groups}  step {m.step_time * 1e3:9.2f} ms  "
                  f"{m.samples_per_s:9.1f} samples/s", file=sys.stderr)
        measurements += got
    allreduce = AllReduceModel(args.intra_node_gbps, args.inter_node_gbps, args.latency_us * 1e-6)
    path = write_table(table_frame(measurements, allreduce), args.out)
    print(f"wrote {path} ({len(measurements)} measurements)")
    return 0


def _number(kind: type, low: float, high: float = math.inf, low_open: bool = False):
    """An argparse type for a flag that is no round field: a finite `kind` in [low, high]
    ((low, high] with low_open); argparse names the flag in the error. Flags that are round
    fields (--time-limit, --solver) go into the round and are checked with it."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {'an integer' if kind is int else 'a number'}, got {text!r}") from None
        if not math.isfinite(value) or value < low or (low_open and value == low) or value > high:
            bounds = f"in {'(' if low_open else '['}{low:g}, {high:g}]" if high < math.inf else (
                f"{'>' if low_open else '>='} {low:g}")
            raise argparse.ArgumentTypeError(f"must be {bounds}, got {text}")
        return value
    return parse


POSITIVE_S = _number(float, 0.0, 1e9, low_open=True)  # seconds, as the schema bounds them
COUNT = _number(int, 1)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="schedlab", description="GPU-cluster scheduling rounds as optimization models")
    parser.add_argument("--version", action="version", version=f"schedlab {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    solve = sub.add_parser("solve", help="solve one round given as JSON; the result JSON goes to stdout")
    solve.add_argument("round_json", nargs="?", default="-",
                       help="round input file (see schedlab/schemas), or - for stdin (the default)")
    solve.add_argument("--stream", action="store_true",
                       help="JSON lines: one round per line in, one result (or error) line out per round, flushed")
    solve.add_argument("--solver", default=None,
                       help="portfolio (default: highs, then highs and cpsat raced), highs, cpsat, appsi_highs, "
                            "or a Pyomo solver")
    solve.add_argument("--time-limit", type=float, default=None, help="solver time limit in seconds")
    solve.add_argument("--solver-option", action="append", default=[], metavar="NAME=VALUE",
                       help="an option for the solver in its own name (settings.solver_options), e.g. "
                            "mip_rel_gap=1e-6 for highs; repeat for more")
    solve.add_argument("--solver-log", action="store_true", help="the solver's own log, on stderr")
    solve.add_argument("--write", default=None, metavar="MODEL.lp",
                       help="also write the round's model (Pyomo, readable names) to an .lp or .mps file")
    solve.add_argument("--pretty", action="store_true", help="indent the output JSON")
    solve.set_defaults(func=_cmd_solve)

    bench = sub.add_parser("bench", help="solve random rounds from the shipped profiles and report latency")
    bench.add_argument("--gpus", type=COUNT, default=64)
    bench.add_argument("--jobs", type=_number(int, 0), default=100)
    bench.add_argument("--rounds", type=COUNT, default=20)
    bench.add_argument("--solver", default=Settings.solver, help="a solver name, as in solve")
    bench.add_argument("--p", default="-1", help="power-mean exponent, or -inf for max-min")
    bench.add_argument("--seed", type=_number(int, 0, 2**53), default=0)
    bench.add_argument("--time-limit", type=float, default=10.0, help="a round's time_limit_s (checked as the JSON field)")
    bench.add_argument("--freeze", type=_number(float, 0.0, 1.0), default=0.0,
                       help="fraction of jobs that opt in to layer freezing")
    bench.add_argument("--formulation", default="goodput", help="the round model: goodput, joint or placement")
    bench.add_argument("--racks", type=_number(int, 0), default=0, help="spread the nodes over this many racks (0: no topology)")
    bench.add_argument("--variability", default="none",
                       help="GPU variability: none, measured (PAL's Longhorn GPUs, seen as tiers) or centroids")
    bench.add_argument("--scale", action="store_true",
                       help="one table from 64 to 65,536 GPUs (jobs = GPUs / 2), each size in a fresh process")
    bench.add_argument("--max-gpus", type=_number(int, 64), default=65536, help="with --scale: the largest size to run")
    bench.add_argument("--json", action="store_true", help="print one JSON object")
    bench.set_defaults(func=_cmd_bench)

    rp = sub.add_parser("replay", help="replay a workload round by round under a policy")
    trace = rp.add_mutually_exclusive_group(required=True)
    trace.add_argument("--workload", help="Pollux-format CSV, or a shipped name (workload-1..8)")
    trace.add_argument("--sia-philly", help="a Sia-Philly trace (CSV, or a shipped name workload-1..8)")
    trace.add_argument("--trace", choices=["philly"],
                       help="the shipped Philly trace at its real timestamps (82,247 jobs over 109 days)")
    rp.add_argument("--start-day", type=_number(float, 0.0), default=0.0, help="with --trace: the window's first day")
    rp.add_argument("--days", type=_number(float, 0.0, low_open=True), default=None,
                    help="with --trace: the window's length (default: to the end)")
    rp.add_argument("--world", default="pollux",
                    help="the simulated world (replay.world.WORLDS): pollux (the Pollux artifact's), pal (PAL's "
                         "simulator), variability (pollux on PAL's measured GPUs and 4 racks)")
    rp.add_argument("--policy", required=True,
                    help="a policy of the registry, e.g. pollux, icefrog, tiresias, ones (an unknown name lists all)")
    rp.add_argument("--nodes", type=COUNT, default=None, help="default: the world's (16)")
    rp.add_argument("--gpus-per-node", type=COUNT, default=None, help="default: the world's (4)")
    rp.add_argument("--round-s", type=POSITIVE_S, default=None, help="scheduling interval in seconds (default: the world's)")
    rp.add_argument("--restart-delay-s", type=_number(float, 0.0, 1e9), default=None,
                    help="seconds without progress after each (re)start (default: the world's)")
    rp.add_argument("--model", choices=["online", "oracle"], default=None,
                    help="throughput model the policy sees (default: the policy's own)")
    rp.add_argument("--out", default=None, help="folder for jobs.csv, rounds.csv and summary.json")
    rp.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    rp.add_argument("--quiet", action="store_true", help="no progress bar")
    rp.set_defaults(func=_cmd_replay)

    rec = sub.add_parser("record", help="write the rounds a policy solves in a replay (JSON lines, the round schema)")
    rec.add_argument("--workload", required=True, help="Pollux-format CSV, or a shipped name (workload-1..8)")
    rec.add_argument("--policy", default="pollux", help="a round-model policy: pollux, sia, joint, icefrog, static_freeze")
    rec.add_argument("--rounds", type=COUNT, default=50, help="the first this many rounds with jobs")
    rec.add_argument("--nodes", type=COUNT, default=None, help="default: the world's (16)")
    rec.add_argument("--out", required=True, help="the JSON-lines file to write")
    rec.set_defaults(func=_cmd_record)

    cmp = sub.add_parser("compare", help="solve recorded rounds with each solver (and formulation); per variant a summary")
    cmp.add_argument("rounds_jsonl", help="rounds, one JSON object per line (schedlab record)")
    cmp.add_argument("--solver", action="append", default=[], help="a registry solver; repeat (the first is the reference)")
    cmp.add_argument("--formulation", action="append", default=[], help="a formulation; repeat (default: the round's own)")
    cmp.add_argument("--customize", default=None, metavar="MODULE:FUNCTION",
                     help="change every round's Pyomo model with this function (Pyomo solvers only)")
    cmp.add_argument("--time-limit", type=POSITIVE_S, default=None, help="each solve's time_limit_s (default: the round's)")
    cmp.add_argument("--format", choices=["md", "csv", "latex"], default="md")
    cmp.add_argument("--per-round", action="store_true", help="also print one row per round and variant")
    cmp.set_defaults(func=_cmd_compare)

    sw = sub.add_parser("sweep", help="run a grid of replays from a TOML config; resumable")
    sw.add_argument("config", help="sweep config (TOML), e.g. experiments/configs/pollux_artifact.toml")
    sw.add_argument("--engine", choices=["local", "dask"], default="local",
                    help="local processes (default) or Dask distributed (pip install 'schedlab[dask]')")
    sw.add_argument("--address", default=None,
                    help="Dask scheduler, tls://HOST:PORT (default: a LocalCluster); plain tcp:// only on loopback "
                         "or with --insecure")
    sw.add_argument("--tls-ca-file", default=None, help="with --address tls://: the CA that signed the scheduler")
    sw.add_argument("--tls-cert", default=None, help="with --address tls://: this client's certificate")
    sw.add_argument("--tls-key", default=None, help="with --address tls://: this client's private key")
    sw.add_argument("--insecure", action="store_true",
                    help="allow a remote tcp:// scheduler (its answerers run code here: trusted networks only)")
    sw.add_argument("--workers", type=COUNT, default=None, help="processes or LocalCluster workers (default: CPU count)")
    sw.add_argument("--out", default=None, help="results folder (default: results/<sweep name>)")
    sw.add_argument("--report", action="store_true", help="then print the table and write the figures")
    sw.add_argument("--quiet", action="store_true", help="no progress bar")
    sw.set_defaults(func=_cmd_sweep)

    srv = sub.add_parser("serve", help="answer rounds over HTTP (POST /v1/solve) until SIGTERM; see schedlab/serve.py")
    srv.add_argument("--host", default="127.0.0.1")
    srv.add_argument("--port", type=_number(int, 1, 65535), default=8080)
    srv.add_argument("--workers", type=COUNT, default=None, help="processes solving rounds (default: one per core)")
    srv.add_argument("--queue", type=_number(int, 0), default=16, help="rounds admitted beyond the busy workers before 503")
    srv.add_argument("--max-time-limit", type=POSITIVE_S, default=60.0, help="cap on a round's time_limit_s (seconds)")
    srv.add_argument("--max-body-mb", type=_number(int, 1, 1024), default=64, help="the largest round body (MiB)")
    srv.add_argument("--allow-solver", action="append", default=[],
                     help="also allow this registry solver (repeatable; highs, cpsat and portfolio always are)")
    srv.add_argument("--allow-solver-options", action="store_true",
                     help="take rounds' settings.solver_options (they reach the solver unchecked: a time limit or a "
                          "file to write among them)")
    srv.set_defaults(func=_cmd_serve)

    rep = sub.add_parser("report", help="tables and figures from a sweep's results folder")
    rep.add_argument("folder", help="the sweep's --out folder")
    rep.add_argument("--format", choices=["md", "csv", "latex"], default="md")
    rep.add_argument("--figures", action="store_true", help="write figures/*.png and *.pdf")
    rep.add_argument("--baseline", default=None, help="policy label to compare against (default: the config's)")
    rep.add_argument("--metric", default=None, help="summary metric (default: the config's, mean_jct_s)")
    rep.set_defaults(func=_cmd_report)

    cal = sub.add_parser("calibrate", help="measure models with PyTorch and write a throughput table, or fit one")
    cal.add_argument("--model", action="append", help="zoo model (repeatable): resnet18, resnet50, bert-base, "
                     "gpt2-small, ncf, tiny-mlp")
    cal.add_argument("--batch-sizes", default="1,2,4,8,16,32,64,128", help="local batch sizes, comma-separated")
    cal.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    cal.add_argument("--warmup", type=_number(int, 0), default=3)
    cal.add_argument("--steps", type=COUNT, default=10, help="timed steps per batch size (the median is kept)")
    cal.add_argument("--frozen-groups", action="store_true", help="also time each frozen prefix of layer groups")
    gbps = _number(float, 0.0, 1e6, low_open=True)
    cal.add_argument("--intra-node-gbps", type=gbps, default=130.0, help="all-reduce bandwidth inside a node (GB/s)")
    cal.add_argument("--inter-node-gbps", type=gbps, default=3.125, help="all-reduce bandwidth across nodes (GB/s)")
    cal.add_argument("--latency-us", type=_number(float, 0.0, 1e9), default=10.0, help="all-reduce latency per ring hop (us)")
    cal.add_argument("--out", default=None, help="table CSV to write, e.g. data/calibration/NAME.csv")
    cal.add_argument("--fit", default=None, help="fit Pollux's model to this table and report the RMSLE")
    cal.add_argument("--json", action="store_true", help="with --fit: one JSON object of fitted throughput_params")
    cal.set_defaults(func=_cmd_calibrate)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except SchedlabError as exc:
        return _fail(str(exc))
    except BrokenPipeError:  # the reader (e.g. `| head`) left: not an error of ours
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
