"""The round commands: solve (one round, or a stream of them), bench (random rounds' latency), serve (HTTP)."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
from typing import Any

from schedlab.cli.common import COUNT, POSITIVE_S, fail, number
from schedlab.errors import ConfigError, SchedlabError
from schedlab.state import Settings

__all__ = ["bench_arguments", "cmd_bench", "cmd_serve", "cmd_solve", "serve_arguments", "solve_arguments"]


def solve_arguments(parser: argparse.ArgumentParser) -> None:
    """A round file or stdin, the solver and its options."""
    parser.add_argument("round_json", nargs="?", default="-",
                        help="round input file (see schedlab/schemas), or - for stdin (the default)")
    parser.add_argument("--stream", action="store_true",
                        help="JSON lines: one round per line in, one result (or error) line out per round, flushed")
    parser.add_argument("--solver", default=None,
                        help="portfolio (default: highs, then highs and cpsat raced), highs, cpsat, appsi_highs, "
                             "or a Pyomo solver")
    parser.add_argument("--time-limit", type=float, default=None, help="solver time limit in seconds")
    parser.add_argument("--solver-option", action="append", default=[], metavar="NAME=VALUE",
                        help="an option for the solver in its own name (settings.solver_options), e.g. "
                             "mip_rel_gap=1e-6 for highs; repeat for more")
    parser.add_argument("--solver-log", action="store_true", help="the solver's own log, on stderr")
    parser.add_argument("--write", default=None, metavar="MODEL.lp",
                        help="also write the round's model (Pyomo, readable names) to an .lp or .mps file")
    parser.add_argument("--pretty", action="store_true", help="indent the output JSON")


def cmd_solve(args: argparse.Namespace) -> int:
    """Solve one round (or, with --stream, one per line) and print its result JSON."""
    from schedlab.api import solve_round
    from schedlab.io import load_json, round_result_to_dict

    if args.stream:
        return _solve_stream(args)
    try:
        with open(args.round_json, "rb") if args.round_json != "-" else sys.stdin.buffer as f:
            data = f.read()
    except OSError as exc:
        return fail(f"cannot read {args.round_json}: {exc.strerror}")
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
        return fail(f"cannot read {args.round_json}: {exc.strerror}")
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


def bench_arguments(parser: argparse.ArgumentParser) -> None:
    """The random rounds' size and settings, or --scale."""
    parser.add_argument("--gpus", type=COUNT, default=None, help="GPUs of one type in nodes of 4 (default: 64)")
    parser.add_argument("--cluster", default=None,
                        help="node pools of GPU types instead of --gpus: TYPE:NODESxGPUS joined by commas, e.g. "
                             "v100:6x4,p100:5x4,k80:5x4, or Gavel's V100:P100:K80 GPU counts, e.g. 36:36:36; jobs get "
                             "parameters on every type, derived from the T4 profiles (models.type_speeds)")
    parser.add_argument("--jobs", type=number(int, 0), default=100)
    parser.add_argument("--rounds", type=COUNT, default=20)
    parser.add_argument("--warmup", type=number(int, 0), default=1,
                        help="untimed rounds first (a process's first round pays its start-up); 0 times a cold start")
    parser.add_argument("--solver", default=Settings.solver, help="a solver name, as in solve")
    parser.add_argument("--p", default="-1", help="power-mean exponent, or -inf for max-min")
    parser.add_argument("--seed", type=number(int, 0, 2**53), default=0)
    parser.add_argument("--time-limit", type=float, default=10.0, help="a round's time_limit_s (checked as the JSON field)")
    parser.add_argument("--mip-gap", type=float, default=Settings.mip_gap,
                        help="a round's mip_gap, the relative gap at which it is optimal (checked as the JSON field)")
    parser.add_argument("--freeze", type=number(float, 0.0, 1.0), default=0.0,
                        help="fraction of jobs that opt in to layer freezing")
    parser.add_argument("--formulation", default="goodput", help="the round model: goodput, joint or placement")
    parser.add_argument("--racks", type=number(int, 0), default=0, help="spread the nodes over this many racks (0: no topology)")
    parser.add_argument("--variability", default="none",
                        help="GPU variability: none, measured (PAL's Longhorn GPUs, seen as tiers) or centroids "
                             "(with --scale too)")
    parser.add_argument("--scale", action="store_true",
                        help="one table from 64 to 65,536 GPUs (jobs = GPUs / 2), each size in a fresh process, under "
                             "--formulation")
    parser.add_argument("--max-gpus", type=number(int, 64), default=65536, help="with --scale: the largest size to run")
    parser.add_argument("--types", default=None,
                        help="with --scale: split every size's nodes over these GPU types, e.g. v100,p100,k80")
    parser.add_argument("--rack-nodes", type=number(int, 0), default=0,
                        help="with --scale: racks of this many nodes of 4 GPUs at every size (16: 32 racks at 2,048 "
                             "GPUs; 0: no topology)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def cmd_bench(args: argparse.Namespace) -> int:
    """Solve random rounds and print their latency (one size, or the --scale table)."""
    from schedlab.bench import run_bench
    from schedlab.clusters import parse_pools
    from schedlab.io import json_text

    if args.scale:
        return _bench_scale(args)
    if args.types is not None:
        return fail("--types goes with --scale; for one size give --cluster v100:6x4,p100:5x4,k80:5x4")
    if args.cluster is not None and args.gpus is not None:
        return fail("--gpus and --cluster both size the cluster: give one (--cluster's pools hold the GPUs)")
    pools = parse_pools(args.cluster) if args.cluster is not None else ()
    if unknown := _underived({p.gpu_type for p in pools}):
        return fail(f"--cluster {args.cluster}: {unknown}")
    p = -math.inf if args.p in ("-inf", "max-min") else float(args.p)
    out = run_bench(args.gpus or 64, args.jobs, args.rounds, solver=args.solver, seed=args.seed, p=p,
                    time_limit_s=args.time_limit, freeze_fraction=args.freeze, formulation=args.formulation,
                    racks=args.racks, variability=args.variability, pools=pools, mip_gap=args.mip_gap,
                    warmup=args.warmup)
    if args.json:
        print(json_text(out))
    else:
        for k, v in out.items():
            print(f"{k:14s} {v}")
    return 0


def _bench_scale(args: argparse.Namespace) -> int:
    from schedlab.bench import SCALE_GPUS, run_scale
    from schedlab.io import json_text

    if args.cluster is not None or args.gpus is not None:
        return fail("--scale runs every size itself: drop --gpus and --cluster (--types v100,p100,k80 splits each "
                    "size over GPU types)")
    types = tuple(t.strip().lower() for t in args.types.split(",")) if args.types is not None else ()
    if types and not all(types):
        return fail(f"--types {args.types}: give GPU type names joined by commas, e.g. v100,p100,k80")
    if unknown := _underived(set(types)):
        return fail(f"--types {args.types}: {unknown}")
    sizes = tuple(g for g in SCALE_GPUS if g <= args.max_gpus)
    rows = run_scale(sizes, seed=args.seed, time_limit_s=args.time_limit, formulation=args.formulation,
                     rack_nodes=args.rack_nodes, variability=args.variability, gpu_types=types, mip_gap=args.mip_gap)
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


def _underived(gpu_types: set[str]) -> str:
    """What is wrong with bench's GPU types: a type the T4 profiles cannot be derived to ('' if none)."""
    from schedlab.models.type_speeds import derived_types

    known = derived_types()
    unknown = sorted(gpu_types - set(known))
    return (f"no speed ratio for GPU type {unknown[0]!r} (data/type_speeds/speeds.csv); use {', '.join(known)}"
            if unknown else "")


def serve_arguments(parser: argparse.ArgumentParser) -> None:
    """Where to listen, the workers and queue, the limits and allowed solvers, the clients and TLS."""
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=number(int, 1, 65535), default=8080)
    parser.add_argument("--workers", type=COUNT, default=None, help="processes solving rounds (default: one per core)")
    parser.add_argument("--queue", type=number(int, 0), default=16, help="rounds admitted beyond the busy workers before 503")
    parser.add_argument("--max-time-limit", type=POSITIVE_S, default=60.0, help="cap on a round's time_limit_s (seconds)")
    parser.add_argument("--max-body-mb", type=number(int, 1, 1024), default=64, help="the largest round body (MiB)")
    parser.add_argument("--allow-solver", action="append", default=[],
                        help="also allow this registry solver (repeatable; highs, cpsat and portfolio always are)")
    parser.add_argument("--allow-solver-options", action="store_true",
                        help="take rounds' settings.solver_options (they reach the solver unchecked: a time limit or a "
                             "file to write among them)")
    parser.add_argument("--token-file", default=None, metavar="PATH",
                        help="serve only requests with `Authorization: Bearer TOKEN` for a TOKEN of this file (one a "
                             "line, or NAME:TOKEN; # comments); each client sees only its own policy states")
    parser.add_argument("--ssl-certfile", default=None, metavar="PEM", help="serve HTTPS with this certificate chain")
    parser.add_argument("--ssl-keyfile", default=None, metavar="PEM", help="the private key of --ssl-certfile")
    parser.add_argument("--insecure", action="store_true",
                        help="allow a --host other than loopback without --token-file (trusted networks only)")


def cmd_serve(args: argparse.Namespace) -> int:
    """Answer rounds over HTTP (or HTTPS) until SIGTERM; a non-loopback host needs --token-file or --insecure."""
    from schedlab.serve_auth import OPEN, check_bind, read_token_file, tls_files

    tls = tls_files(args.ssl_certfile, args.ssl_keyfile)
    clients = read_token_file(args.token_file) if args.token_file else OPEN
    for warning in check_bind(args.host, bool(clients), tls is not None, args.insecure):
        print(f"schedlab: warning: {warning}", file=sys.stderr)
    try:
        from schedlab.serve import ServeConfig, serve
    except ImportError as exc:
        return fail(f"serve needs the serve extra ({exc.name} is missing): pip install 'schedlab[serve]'")
    from schedlab.solvers.registry import SOLVERS, array_solver_names

    unknown = [s for s in args.allow_solver if s not in SOLVERS]
    if unknown:
        return fail(f"--allow-solver {unknown[0]}: not in the registry; use one of {', '.join(SOLVERS)}")
    workers = args.workers if args.workers is not None else ServeConfig().workers
    serve(ServeConfig(workers, args.queue, args.max_time_limit, args.max_body_mb * 2**20,
                      allow_solvers=(*array_solver_names(), *args.allow_solver),
                      allow_solver_options=args.allow_solver_options), args.host, args.port,
          clients=clients, tls=tls)
    return 0
