"""Every answer at least the greedy's, under any time limit: `python experiments/limit_floor.py [--json]`.

One random round (schedlab.bench.random_round, seed 1: 1,000 jobs on 2,048 GPUs by default)
solved by each solver under time limits from 1e-6 s to 1 s, each call in a process of its own
(so no solver is warm), beside the round's greedy answer (the formulation's fallback) and its
optimum. For each: the status, the objective against the greedy's, and the call's wall time
against twice its limit plus the floor's cost (what answering the greedy costs with no solver:
validating the round, its options, the greedy, decoded and verified), which is printed with it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import numpy as np

from schedlab.api import solve_round
from schedlab.bench import random_round
from schedlab.formulations import FORMULATIONS
from schedlab.io import json_text
from schedlab.state import Settings
from schedlab.verify import verify

LIMITS_S = (1e-6, 1e-3, 1e-2, 1e-1, 1.0)
SOLVERS = ("highs", "cpsat", "portfolio", "appsi_highs")


def the_round(gpus: int, jobs: int, seed: int):
    return random_round(np.random.default_rng(seed), gpus, jobs, 4, settings=Settings())


def one_call(gpus: int, jobs: int, seed: int, solver: str, limit_s: float) -> dict:
    """solve_round on the round, timed around the call: the round built before, and the process
    warmed as the floor's measure is (a call whose limit is spent before any solver starts)."""
    ri = the_round(gpus, jobs, seed)
    solve_round(ri, time_limit_s=1e-9)
    t0 = time.perf_counter()
    result = solve_round(ri, solver=solver, time_limit_s=limit_s)
    wall_s = time.perf_counter() - t0
    placed = [a for a in result.allocations if a.gpus]
    return {"solver": solver, "limit_s": limit_s, "status": str(result.status), "objective": result.objective,
            "bound": result.bound, "wall_s": wall_s, "jobs_placed": len(placed),
            "gpus_used": sum(a.num_gpus for a in placed), "message": result.message[:120]}


def floor(gpus: int, jobs: int, seed: int) -> dict:
    """The greedy's objective and the floor's cost: what solve_round spends to answer the greedy
    with no solver at all (validating the round, its options, the greedy, decoding and verifying
    it), the median of 3 warm calls whose limit is spent before a solver could start; and the
    greedy's own part of it (after the options)."""
    ri = the_round(gpus, jobs, seed)
    solve_round(ri, time_limit_s=1e-9)  # warm: imports and caches, as in the timed calls' processes
    calls_s = []
    for _ in range(3):
        t0 = time.perf_counter()
        solve_round(ri, time_limit_s=1e-9)
        calls_s.append(time.perf_counter() - t0)
    model = FORMULATIONS["goodput"](ri)
    t0 = time.perf_counter()
    values = model.fallback()
    verify(ri, model.decode(values))
    greedy_s = time.perf_counter() - t0
    optimum = solve_round(ri, time_limit_s=60.0)
    return {"greedy_objective": model.objective(values), "floor_s": float(np.median(calls_s)), "greedy_s": greedy_s,
            "optimum": optimum.objective, "optimum_status": str(optimum.status)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=2048)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--solvers", default=",".join(SOLVERS))
    parser.add_argument("--one", nargs=2, metavar=("SOLVER", "LIMIT_S"), help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true", help="end with one JSON line")
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(one_call(args.gpus, args.jobs, args.seed, args.one[0], float(args.one[1]))))
        return 0
    base = floor(args.gpus, args.jobs, args.seed)
    print(f"{args.gpus} GPUs / {args.jobs} jobs: greedy {base['greedy_objective']:.1f} (the floor: "
          f"{1e3 * base['floor_s']:.0f} ms, the greedy's part {1e3 * base['greedy_s']:.0f} ms), "
          f"optimum {base['optimum']:.1f} ({base['optimum_status']})")
    rows = []
    for solver in args.solvers.split(","):
        for limit_s in LIMITS_S:
            out = subprocess.run([sys.executable, __file__, "--gpus", str(args.gpus), "--jobs", str(args.jobs), "--seed",
                                  str(args.seed), "--one", solver, repr(limit_s)], capture_output=True, text=True, check=True)
            row = json.loads(out.stdout.strip().splitlines()[-1])
            row["vs_greedy"] = row["objective"] - base["greedy_objective"]
            row["within"] = row["wall_s"] <= 2 * limit_s + base["floor_s"]
            rows.append(row)
            print(f"{solver:12s} {limit_s:8.0e} s  {row['status']:11s} objective {row['objective']:10.1f} "
                  f"({row['vs_greedy']:+9.1f} vs greedy)  {row['jobs_placed']:5d} jobs on {row['gpus_used']:5d} GPUs  "
                  f"{row['wall_s']:7.3f} s {'ok' if row['within'] else 'OVER 2x limit + floor'}")
    if args.json:
        print(json_text({**base, "gpus": args.gpus, "jobs": args.jobs, "rows": rows,
                         "never_below_greedy": all(r["vs_greedy"] >= -1e-6 * abs(base["greedy_objective"]) for r in rows),
                         "all_within": all(r["within"] for r in rows)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
