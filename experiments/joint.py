"""One cluster, every mechanism: the joint round against each seed's mechanism on its own.

Two sweeps (experiments/configs/joint_variability.toml, joint_pal.toml; resumable):
  - world "variability": the 8 Pollux workloads on 16 x 4 GPUs with PAL's measured Longhorn
    variability and 4 racks with 2:1 oversubscribed uplinks, under tiresias, optimus, pollux
    (variability-blind), pollux+pal (Pollux's allocation, PAL's placement), joint, icefrog and
    joint+freeze (every job opts in to freezing with a 3 % budget);
  - world "pal": the 8 Sia-Philly traces in PAL's semantics under packed_sticky, pal, pm_first,
    milp (jobs keep their trace GPU counts) and joint (which may choose them).
Writes variability.csv, pal.csv and table.md to --out; the last line of --json has mean_jct_s per
policy per world and geomean_jct_reduction_vs_packed_sticky in PAL's world.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import pandas as pd
from scipy.stats import gmean

from schedlab.bench.sweeps import reduction_vs
from schedlab.io import json_text
from schedlab.sweep import load_sweep, results_frames

CONFIGS = Path(__file__).parent / "configs"  # the sweeps' grids, beside this script
METRICS = {"mean_jct_s": "mean", "p99_jct_s": "mean", "makespan_s": "mean", "utilization": "mean",
           "solve_p50_ms": "median", "restarts_total": "mean"}


def per_policy(results: pd.DataFrame, labels: list[str]) -> pd.DataFrame:
    """One row per policy (in the config's order): metrics averaged over the traces (solve time:
    median)."""
    table = results.groupby("policy").agg(**{m: (m, how) for m, how in METRICS.items()})
    table["geomean_jct_s"] = results.groupby("policy").geomean_jct_s.agg(gmean)
    return table.reindex(labels).round(3)


def main(argv: list[str] | None = None) -> int:
    """Run both worlds' sweeps, print and write the tables; with --json end with one JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", type=Path, default=CONFIGS, help="folder holding joint_variability.toml and joint_pal.toml")
    parser.add_argument("--workloads", default=None, help="comma-separated Pollux workloads (default: the config's)")
    parser.add_argument("--traces", default=None, help="comma-separated Sia-Philly traces (default: the config's)")
    parser.add_argument("--processes", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--out", default="results/joint")
    parser.add_argument("--json", action="store_true", help="end with one JSON line")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    out = Path(args.out)
    sweeps, labels = {}, {}
    for world, config, kind, chosen in (("variability", "joint_variability", "workloads", args.workloads),
                                        ("pal", "joint_pal", "sia_philly", args.traces)):
        overrides = {"traces": {kind: chosen.split(",")}} if chosen else {}
        sweeps[world] = load_sweep(args.configs / f"{config}.toml", overrides)
        labels[world] = list(dict.fromkeys(c["policy"]["label"] for c in sweeps[world].cells))
    # one pool: PAL's world's short cells fill the workers the variability world's last ones leave idle
    runs = dict(zip(sweeps, results_frames([(sweep, out / world) for world, sweep in sweeps.items()], args.processes)))
    for world, frame in runs.items():
        frame.to_csv(out / f"{world}.csv", index=False)
    variability, pal = per_policy(runs["variability"], labels["variability"]), per_policy(runs["pal"], labels["pal"])
    reduction = reduction_vs(runs["pal"])
    pal["reduction_vs_packed_sticky"] = [reduction.get(p, 0.0) for p in pal.index]
    jct = variability.mean_jct_s
    blind_gap = float(jct["pollux"] / jct["joint"] - 1)
    text = ("## Pollux workloads, 16 x 4 GPUs, PAL's measured variability, 4 racks (uplinks 50 Gb/s)\n\n"
            + variability.to_markdown() + f"\n\npollux (variability-blind) vs joint: {blind_gap:+.1%} mean JCT\n\n"
            "## Sia-Philly traces in PAL's world (L = 1.7)\n\n" + pal.to_markdown() + "\n")
    (out / "table.md").write_text(text)
    print(text)
    if args.json:
        print(json_text({"mean_jct_s": {"variability": jct.to_dict(), "pal": pal.mean_jct_s.to_dict()},
                          "geomean_jct_reduction_vs_packed_sticky": reduction,
                          "joint_le_pollux_and_pollux_pal": bool(jct["joint"] <= min(jct["pollux"], jct["pollux+pal"])),
                          "pollux_vs_joint": blind_gap, "wall_s": time.perf_counter() - t0}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
