"""Clusters of several GPU types: Gavel's policies on Gavel's world, and Sia against type-blind Pollux.

Two sweeps (resumable):
  - experiments/configs/heterogeneous_gavel.toml, world "gavel": Gavel's msr trace 103959 of
    seed 0, its first 345 jobs (those submitted in its first 40 days: a sweep keeps the world's
    60-day horizon, which the later ones would not reach the end of), on 36 V100 + 36 P100 +
    36 K80 (Gavel's simulated cluster) and on 8 V100 + 16 P100 + 24 K80 (its physical one) in
    servers of 4 GPUs, 360 s rounds, under gavel_las_agnostic (type-blind LAS),
    gavel_las (heterogeneity-aware LAS), sia (goodput, p = -0.5, each job's model per type),
    joint, tiresias and fifo: 160 CPU s. Of Gavel's shipped traces, 0e4a51 (1,181 jobs, 85
    days) and 6214e9 (2,000 jobs, 48 days) load the cluster more: 0e4a51 whole takes 165 s
    under gavel_las alone and 200 s type-blind, and its first 554 jobs 370 s under sia alone,
    three of its policies leaving jobs unfinished at 60 days; ed69ec (951 jobs, 76 days) does
    not finish within them under tiresias; the rest hold 3 to 18 jobs;
  - experiments/configs/mixed_pollux.toml: the 8 Pollux workloads on 64 GPUs (24 T4 from
    Pollux's tables, 20 V100 and 20 K80 derived from them), 60 s rounds, under pollux
    (type-blind), sia and joint (type-aware).
Per policy: jobs finished, mean and p99 JCT, makespan, utilization overall and per GPU type
(sim.metrics), the rounds' median and 95th-percentile solve time, averaged over the traces.
Writes gavel.csv, mixed_pollux.csv and table.md to --out (a table per world and cluster); the
last line of --json has mean_jct_s per policy per world and cluster, las_aware_vs_agnostic
(gavel_las / gavel_las_agnostic mean JCT, per cluster) and sia_vs_pollux (sia / pollux mean
JCT). The whole script: about 6 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import pandas as pd

from schedlab.io import json_text, spreadsheet_safe
from schedlab.sweep import load_sweep, results_frame

CONFIGS = Path(__file__).parent / "configs"  # the sweeps' grids, beside this script
SWEEPS = {"gavel": ("heterogeneous_gavel", "gavel"), "mixed_pollux": ("mixed_pollux", "workloads")}
METRICS = {"jobs_completed": "sum", "jobs_total": "sum", "mean_jct_s": "mean", "p99_jct_s": "mean",
           "makespan_s": "mean", "utilization": "mean", "solve_p50_ms": "median", "solve_p95_ms": "median"}
FLOATS = ",.10g"  # the tables' numbers: seconds whole with thousands separators, never 1e+06


def per_policy(results: pd.DataFrame, labels: list[str]) -> pd.DataFrame:
    """One row per policy (in the config's order): the METRICS and each GPU type's utilization,
    over the traces."""
    typed = [c for c in results.columns if c.startswith("utilization_") and results[c].notna().any()]
    table = results.groupby("policy").agg(**{m: (m, how) for m, how in (METRICS | dict.fromkeys(typed, "mean")).items()})
    columns = list(METRICS)
    columns[columns.index("utilization") + 1:columns.index("utilization") + 1] = typed
    return table.reindex(labels)[columns].round(3).round(dict.fromkeys(["mean_jct_s", "p99_jct_s", "makespan_s"], 0))


def run(config: Path, overrides: dict, out: Path, processes: int) -> tuple[pd.DataFrame, list[str], list[str]]:
    """The sweep in `config` with `overrides`, resumable under `out`; its results, and its policy
    labels and clusters in the config's order."""
    sweep = load_sweep(config, overrides)
    labels = list(dict.fromkeys(c["policy"]["label"] for c in sweep.cells))
    clusters = list(dict.fromkeys(c["cluster"] for c in sweep.cells))
    return results_frame(sweep, out, processes), labels, clusters


def main(argv: list[str] | None = None) -> int:
    """Run both sweeps, print and write the tables; with --json end with one JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", type=Path, default=CONFIGS,
                        help="folder holding heterogeneous_gavel.toml and mixed_pollux.toml")
    parser.add_argument("--traces", default=None, help="comma-separated Gavel traces (default: the config's)")
    parser.add_argument("--workloads", default=None, help="comma-separated Pollux workloads (default: the config's)")
    parser.add_argument("--max-jobs", type=int, default=None, help="the first N jobs of every trace (default: the configs')")
    parser.add_argument("--processes", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--out", default="results/heterogeneous")
    parser.add_argument("--json", action="store_true", help="end with one JSON line")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    out = Path(args.out)
    chosen = {"gavel": args.traces, "mixed_pollux": args.workloads}
    tables: dict[str, dict[str, pd.DataFrame]] = {}
    for world, (config, kind) in SWEEPS.items():
        traces = {kind: chosen[world].split(",")} if chosen[world] else {}
        overrides = {"traces": traces | ({"max_jobs": args.max_jobs} if args.max_jobs else {})}
        results, labels, clusters = run(args.configs / f"{config}.toml", overrides, out / world, args.processes)
        spreadsheet_safe(results).to_csv(out / f"{world}.csv", index=False)
        tables[world] = {cluster: per_policy(results[results.cluster == cluster], labels) for cluster in clusters}
    jct = {world: {cluster: table.mean_jct_s for cluster, table in by_cluster.items()} for world, by_cluster in tables.items()}
    las = {cluster: float(j["gavel_las"] / j["gavel_las_agnostic"]) for cluster, j in jct["gavel"].items()}
    (pollux_jct,) = jct["mixed_pollux"].values()
    sia = float(pollux_jct["sia"] / pollux_jct["pollux"])
    text = "".join(f"## Gavel's msr traces on {cluster} (servers of 4), 360 s rounds\n\n{table.to_markdown(floatfmt=FLOATS)}"
                   f"\n\ngavel_las / gavel_las_agnostic mean JCT: {las[cluster]:.3f}\n\n"
                   for cluster, table in tables["gavel"].items())
    text += "".join(f"## Pollux workloads on {cluster} (nodes of 4), 60 s rounds\n\n{table.to_markdown(floatfmt=FLOATS)}"
                    f"\n\nsia / pollux mean JCT: {sia:.3f}\n" for cluster, table in tables["mixed_pollux"].items())
    (out / "table.md").write_text(text)
    print(text)
    if args.json:
        print(json_text({"mean_jct_s": {world: {cluster: j.to_dict() for cluster, j in by_cluster.items()}
                                        for world, by_cluster in jct.items()},
                          "las_aware_vs_agnostic": las, "sia_vs_pollux": sia,
                          "all_jobs_completed": all(bool((t.jobs_completed == t.jobs_total).all())
                                                    for by_cluster in tables.values() for t in by_cluster.values()),
                          "wall_s": time.perf_counter() - t0}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
