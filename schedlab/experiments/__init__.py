"""Experiments that regenerate the README's tables; each has a thin script in experiments/."""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from schedlab.io import spreadsheet_safe
from schedlab.sweep import load_sweep, results_frame


@dataclass(frozen=True)
class SweepPair:
    """The results of an experiment's main sweep and its parameter sweep, as run."""

    args: argparse.Namespace
    main: pd.DataFrame
    second: pd.DataFrame
    out: Path
    started_s: float  # perf_counter at the start


def run_sweep_pair(description: str, argv: list[str] | None, configs: Path | None, first: str, second: str,
                   traces: str, out: str) -> SweepPair:
    """Parse the common options (--configs, --TRACES, --processes, --out, --json), run the sweeps
    `first`.toml into OUT and `second`.toml into OUT/`second`, and save both as CSV."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--configs", type=Path, default=configs, required=configs is None,
                        help=f"folder holding {first}.toml and {second}.toml")
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
    main = results_frame(load_sweep(args.configs / f"{first}.toml", overrides), folder, args.processes)
    other = results_frame(load_sweep(args.configs / f"{second}.toml", overrides), folder / second, args.processes)
    spreadsheet_safe(main).to_csv(folder / "results.csv", index=False)
    spreadsheet_safe(other).to_csv(folder / f"{second}.csv", index=False)
    return SweepPair(args, main, other, folder, t0)
