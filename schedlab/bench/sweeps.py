"""The sweeps the experiments in experiments/ share: running them and the figures of merit read
off their results.

Imported by name (`schedlab.bench.sweeps`), not with the package: it loads the sweep machinery
(pandas, matplotlib), which the latency benchmarks and the fuzzer do not need.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from scipy.stats import gmean

from schedlab.io import spreadsheet_safe
from schedlab.sweep import load_sweep, results_frame, results_frames

__all__ = ["SweepPair", "reduction_vs", "run_sweep_pair", "workload_results"]


@dataclass(frozen=True)
class SweepPair:
    """The results of an experiment's main sweep, its parameter sweep and any more, as run."""

    args: argparse.Namespace
    main: pd.DataFrame
    second: pd.DataFrame
    out: Path
    started_s: float  # perf_counter at the start
    more: dict[str, pd.DataFrame] = field(default_factory=dict)  # by config name


def run_sweep_pair(description: str, argv: list[str] | None, configs: Path, first: str, second: str,
                   traces: str, out: str, more: tuple[str, ...] = ()) -> SweepPair:
    """Parse an experiment's command line and run its sweeps, resumable, saving each as CSV.

    The options are --configs (default `configs`), --traces (`traces` "sia_philly") or
    --workloads (`traces` "workloads"), --processes, --out (default `out`) and --json. The sweep
    `first`.toml runs into OUT (results.csv), `second`.toml and each of `more` into OUT/NAME
    (NAME.csv), all their cells in one pool (sweep.run_sweeps).
    """
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--configs", type=Path, default=configs, help=f"folder holding {first}.toml and {second}.toml")
    flag = {"sia_philly": "traces", "workloads": "workloads"}[traces]
    parser.add_argument(f"--{flag}", default=None, help=f"comma-separated {traces} traces (default: the configs')")
    parser.add_argument("--processes", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--out", default=out)
    parser.add_argument("--json", action="store_true", help="end with one JSON line")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    chosen = getattr(args, flag)
    overrides = {"traces": {traces: chosen.split(",")}} if chosen else {}
    folder = Path(args.out)
    names = (second, *more)
    main, *others = results_frames([(load_sweep(args.configs / f"{first}.toml", overrides), folder)]
                                   + [(load_sweep(args.configs / f"{n}.toml", overrides), folder / n) for n in names],
                                   args.processes)
    spreadsheet_safe(main).to_csv(folder / "results.csv", index=False)
    for name, frame in zip(names, others):
        spreadsheet_safe(frame).to_csv(folder / f"{name}.csv", index=False)
    return SweepPair(args, main, others[0], folder, t0, dict(zip(more, others[1:])))


def workload_results(config: str | Path, out: str | Path, processes: int | None = None,
                     workloads: list[str] | None = None, policies: list[str] | None = None, model: str | None = None,
                     progress: bool = True) -> pd.DataFrame:
    """The sweep in `config` (resumable, cells under out/cells), with optional overrides; one
    row per workload x policy with every summary metric and the cell's CPU seconds."""
    overrides: dict[str, dict] = {"grid": {}}
    if workloads:
        overrides["traces"] = {"workloads": workloads}
    if policies:
        overrides["grid"]["policies"] = policies
    if model:
        overrides["grid"]["model"] = model
    sweep = load_sweep(config, overrides)
    if policies and sweep.baseline not in policies:
        sweep = load_sweep(config, overrides | {"sweep": {"baseline": policies[0]}})
    return results_frame(sweep, out, processes, progress).rename(columns={"trace": "workload"})


def reduction_vs(results: pd.DataFrame, baseline: str = "packed_sticky") -> dict[str, float]:
    """1 - geometric mean over traces of geomean JCT(policy) / geomean JCT(baseline)."""
    wide = results.pivot(index="trace", columns="policy", values="geomean_jct_s")
    return {p: float(1 - gmean(wide[p] / wide[baseline])) for p in wide.columns if p != baseline}
