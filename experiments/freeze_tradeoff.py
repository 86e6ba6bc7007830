"""Layer freezing (IceFrog-style) against no freezing and PipeTransformer's static schedule.

Two sweeps (experiments/configs/freeze_tradeoff.toml and freeze_sweep.toml, resumable): the 8
Pollux workloads with every job opting in (3 % budget, default penalty model) under pollux (no
freezing), static_freeze and icefrog, and tiresias and optimus (no freezing, the schedulers
IceFrog's headline compares against); then workload-6 across penalty strength (x 0.25, 0.5, 1)
and opt-in fraction (25, 50, 100 %). Reports mean JCT, its change against no freezing, the
penalty spent (mean and max over opted-in jobs) and the jobs that overspent their budget.
IceFrog's paper: -36 % to -48 % average JCT against state-of-the-art schedulers (48 GPUs).
Writes results.csv, freeze_sweep.csv and table.md to --out.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pandas as pd

from schedlab.bench.sweeps import run_sweep_pair
from schedlab.io import json_text

CONFIGS = Path(__file__).parent / "configs"  # the sweeps' grids, beside this script
PUBLISHED_CHANGE = (-0.48, -0.36)


def change_vs(results: pd.DataFrame, baseline: str = "pollux", keys: tuple[str, ...] = ()) -> pd.Series:
    """Relative change of mean JCT (averaged over traces) against the baseline, per policy (and keys)."""
    per = results.groupby(list(keys) + ["policy"]).mean_jct_s.mean()
    if not keys:
        return per / per[baseline] - 1
    base = per.xs(baseline, level="policy")
    return per / base.reindex(per.index.droplevel("policy")).to_numpy() - 1


def _table(results: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    table = results.groupby(keys + ["policy"], sort=bool(keys)).agg(
        mean_jct_s=("mean_jct_s", "mean"), penalty_mean=("penalty_mean", "mean"), penalty_max=("penalty_max", "max"),
        budget_violations=("budget_violations", "sum"), solve_p50_ms=("solve_p50_ms", "median")).round(4)
    table["change_vs_no_freeze"] = change_vs(results, keys=tuple(keys)).reindex(table.index).round(4)
    return table


def main(argv: list[str] | None = None) -> int:
    """Run both sweeps, print and write the tables; with --json end with one JSON line."""
    run = run_sweep_pair(__doc__.splitlines()[0], argv, CONFIGS, "freeze_tradeoff", "freeze_sweep", "workloads",
                         "results/freeze_tradeoff")
    args, main_results, sweep, out, t0 = run.args, run.main, run.second, run.out, run.started_s

    table = _table(main_results, [])
    by_trace = main_results.pivot(index="trace", columns="policy", values="mean_jct_s").round(1)
    sweep_table = _table(sweep, ["penalty_scale", "opt_in"])
    text = ("## Pollux workloads, 16 x 4 GPUs, every job opts in, 3 % budget, default penalty\n\n"
            + table.to_markdown() + "\n\n## Mean JCT (s) per workload\n\n" + by_trace.to_markdown()
            + "\n\n## Penalty strength x opt-in fraction (workload-6)\n\n" + sweep_table.to_markdown() + "\n"
            + f"\nIceFrog (TPDS 2025), published: {PUBLISHED_CHANGE[1]:+.0%} to {PUBLISHED_CHANGE[0]:+.0%} mean JCT.\n")
    (out / "table.md").write_text(text)
    print(text)
    if args.json:
        change = change_vs(main_results)
        print(json_text({
            "mean_jct_change_vs_no_freeze": float(change["icefrog"]),
            "static_change_vs_no_freeze": float(change["static_freeze"]),
            "icefrog_change_vs": {b: float(change_vs(main_results, baseline=b)["icefrog"])
                                  for b in ("tiresias", "optimus")},
            "budget_violations": int(main_results.loc[main_results.policy == "icefrog", "budget_violations"].sum()),
            "static_budget_violations": int(main_results.loc[main_results.policy == "static_freeze",
                                                             "budget_violations"].sum()),
            "penalty_mean": float(main_results.loc[main_results.policy == "icefrog", "penalty_mean"].mean()),
            "sweep_change_vs_no_freeze": {f"scale={s},opt_in={o}": float(v) for (s, o, p), v
                                          in change_vs(sweep, keys=("penalty_scale", "opt_in")).items()
                                          if p == "icefrog"},
            "published_change": list(PUBLISHED_CHANGE),
            "wall_s": time.perf_counter() - t0}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
