"""Pollux's published result, reproduced: the 8 artifact workloads under each policy.

Replays workloads/workload-{1..8}.csv (160 jobs, 16 nodes x 4 GPUs, 60 s rounds) under
pollux, sia, tiresias and optimus and prints mean JCT per workload next to the artifact's own
simulator results (results-jobload/<policy>-1.0/summary.json: Pollux 2751 s, Tiresias 4038 s,
Optimus 5682 s on average). The grid is experiments/configs/pollux_artifact.toml, run as a
resumable sweep (cells under --out/cells, reused on the next run). Writes results.csv (one row
per workload x policy, every summary metric) and table.md to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import pandas as pd

from schedlab.bench.sweeps import workload_results
from schedlab.io import json_text
from schedlab.models.profiles import data_dir
from schedlab.policies import POLICIES

CONFIG = Path(__file__).parent / "configs" / "pollux_artifact.toml"  # the sweep's grid


def published_means() -> dict[str, dict[str, float]]:
    """policy -> workload -> mean JCT (s) from the artifact's results-jobload summaries."""
    out = {}
    for path in sorted((data_dir() / "pollux" / "results-jobload").glob("*-1.0/summary.json")):
        out[path.parent.name.split("-")[0]] = json.loads(path.read_text())["avgs"]
    return out


def table(results: pd.DataFrame) -> pd.DataFrame:
    """Mean JCT per workload and policy, ours beside the artifact's, with a mean row."""
    published = published_means()
    ours = results.pivot(index="workload", columns="policy", values="mean_jct_s")
    ours = ours.loc[sorted(ours.index, key=lambda w: int(w.split("-")[1]))]
    cols = {}
    for policy in ours.columns:
        cols[f"{policy} (s)"] = ours[policy]
        if policy in published:
            cols[f"{policy} artifact (s)"] = pd.Series(published[policy]).reindex(ours.index)
    out = pd.DataFrame(cols)
    out.loc["mean"] = out.mean()
    return out.round(0)


def headline(tab: pd.DataFrame) -> dict[str, float]:
    """Mean JCT per policy over the workloads, and its deviation from the artifact."""
    out: dict[str, float] = {}
    for col in tab.columns:
        if col.endswith(" (s)") and "artifact" not in col:
            policy = col[:-4]
            out[f"{policy}_mean_jct_s"] = float(tab.loc["mean", col])
            ref = f"{policy} artifact (s)"
            if ref in tab.columns:
                out[f"{policy}_vs_artifact"] = float(tab.loc["mean", col] / tab.loc["mean", ref] - 1)
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the sweep, print and write the table; with --json end with one JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=CONFIG, help="the sweep config (TOML)")
    parser.add_argument("--workloads", default=None, help="comma-separated shipped names or CSV paths (default: the config's)")
    parser.add_argument("--policies", default=None, help=f"comma-separated, from {', '.join(POLICIES)} (default: the config's)")
    parser.add_argument("--processes", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--model", choices=["online", "oracle"], default=None, help="throughput model the policies see")
    parser.add_argument("--out", default="results/pollux_artifact", help="results folder; finished cells are reused")
    parser.add_argument("--json", action="store_true", help="end with one JSON line: per-policy means and deviations")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    results = workload_results(args.config, args.out, args.processes, _split(args.workloads), _split(args.policies), args.model)
    wall_s = time.perf_counter() - t0
    tab = table(results)
    out = Path(args.out)
    results.to_csv(out / "results.csv", index=False)
    markdown = tab.to_markdown()
    (out / "table.md").write_text(markdown + "\n")
    print(markdown)
    print(f"\nwall time {wall_s:.0f} s with {args.processes} processes; per replay CPU s: "
          + ", ".join(f"{p} {g:.1f}" for p, g in results.groupby("policy").cpu_s.mean().items()))
    if args.json:
        print(json_text(headline(tab) | {"wall_s": wall_s}))
    return 0


def _split(csv: str | None) -> list[str] | None:
    return csv.split(",") if csv else None


if __name__ == "__main__":
    sys.exit(main())
