"""Placement solve time by cluster size: PAL's greedy against the exact placement model.

Random rounds (jobs of 1, 2, 4 or 8 GPUs of the four variability classes, drawn until the next
one does not fit) on clusters of 4-GPU nodes whose GPUs are slowed as in PAL's world
(clusters.make_cluster: measured GPUs drawn, seeded, and seen as PAL's tiers over the cluster). Per size: PAL
greedy's time, the exact model's size (up to EXACT_MAX_GPUS; above it, windows of it are solved:
formulations.placement_windows), and its build + solve time, status and round objective against
the greedy it is warm-started from (never below it), for an array solver of the registry.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from schedlab.bench import random_placement_round
from schedlab.formulations.placement import build
from schedlab.formulations.placement_greedy import pal_greedy
from schedlab.formulations.placement_problem import placement_objective
from schedlab.formulations.placement_round import EXACT_MAX_GPUS, solve_placement
from schedlab.io import json_text
from schedlab.solvers.registry import array_solver_names
from schedlab.solvers.registry import solver as registry_solver
from schedlab.state import Settings


def measure(num_gpus: int, seed: int, solver: str, time_limit_s: float, mip_gap: float = Settings().mip_gap) -> dict:
    """One round of num_gpus GPUs (seeded): the greedy's time, the exact model's size, time,
    status and objective against the greedy's."""
    pi = random_placement_round(num_gpus, seed, np.random.default_rng(seed))
    t0 = time.perf_counter()
    greedy = pal_greedy(pi, np.random.default_rng(seed))
    greedy_ms = 1e3 * (time.perf_counter() - t0)
    rows, cols = build(pi).arrays.A.shape if num_gpus <= EXACT_MAX_GPUS else (0, 0)
    exact = solve_placement(pi, registry_solver(solver), time_limit_s=time_limit_s, mip_gap=mip_gap, start=greedy)
    return {"gpus": num_gpus, "seed": seed, "jobs": len(pi.jobs), "greedy_ms": greedy_ms, "rows": rows, "cols": cols,
            "exact_ms": 1e3 * (exact.build_s + exact.solve_s), "status": exact.status,
            "vs_greedy": exact.objective / placement_objective(pi, greedy) - 1}


def main(argv: list[str] | None = None) -> int:
    """Measure each size over the seeds and print it; with --json end with one JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", default="16,32,64", help="comma-separated cluster sizes (multiples of 4)")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--solver", choices=array_solver_names(), default="portfolio")
    parser.add_argument("--time-limit", type=float, default=2.0, help="seconds per exact solve")
    parser.add_argument("--mip-gap", type=float, default=Settings().mip_gap,
                        help="relative gap at which a solve is proven (default: a round's, %(default)g)")
    parser.add_argument("--json", action="store_true", help="end with one JSON line")
    args = parser.parse_args(argv)
    summary = {}
    for gpus in (int(g) for g in args.gpus.split(",")):
        runs = [measure(gpus, seed, args.solver, args.time_limit, args.mip_gap) for seed in range(args.seeds)]
        summary[gpus] = {"jobs": float(np.median([r["jobs"] for r in runs])),
                         "greedy_p50_ms": float(np.median([r["greedy_ms"] for r in runs])),
                         "model_rows_cols": [runs[0]["rows"], runs[0]["cols"]],
                         "exact_p50_ms": float(np.median([r["exact_ms"] for r in runs])),
                         "proven": sum(r["status"] == "optimal" for r in runs), "runs": len(runs),
                         "exact_vs_greedy_mean": float(np.mean([r["vs_greedy"] for r in runs]))}
        s = summary[gpus]
        model_size = "{}x{}".format(*s["model_rows_cols"]) if gpus <= EXACT_MAX_GPUS else "in windows"
        print(f"{gpus:5d} GPUs  {s['jobs']:5.0f} jobs  greedy {s['greedy_p50_ms']:8.1f} ms  model "
              f"{model_size}  exact ({args.solver}) p50 {s['exact_p50_ms']:8.0f} ms, "
              f"proven {s['proven']}/{s['runs']}, objective vs greedy {s['exact_vs_greedy_mean']:+.2%}", flush=True)
    if args.json:
        print(json_text({"solver": args.solver, "time_limit_s": args.time_limit, "mip_gap": args.mip_gap,
                         "by_gpus": summary}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
