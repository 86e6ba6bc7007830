"""PAL's variability-aware placement against Packed-Sticky, PM-First and the exact placement.

Three sweeps in one pool (experiments/configs/pal_variability.toml, pal_locality.toml,
pal_ablation.toml; resumable): the 8 Sia-Philly traces in PAL's world (sim.world.PAL_WORLD: the
artifact's simulator, 16 x 4 GPUs, 360 s rounds, FIFO, locality penalty 1.7) under
packed_sticky, pm_first, pal, milp and milp_cpsat (the exact placement, warm-started from PAL's
greedy, 50 ms per round); the locality penalty 1.0 -> 3.0; and every combination of the
simulator's semantics that make the gain (work, slowdowns, backfill) for packed_sticky, pm_first
and pal. Reduction of geomean JCT
against Packed-Sticky = 1 - geometric mean over traces of (policy / packed_sticky); PAL's paper:
pal 43 %, pm_first 40 %. Writes results.csv, pal_locality.csv, pal_ablation.csv and table.md to
--out.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import gmean

from schedlab.bench.sweeps import reduction_vs, run_sweep_pair
from schedlab.io import json_text

CONFIGS = Path(__file__).parent / "configs"  # the sweeps' grids, beside this script
PUBLISHED_REDUCTION = {"pal": 0.43, "pm_first": 0.40}


def main(argv: list[str] | None = None) -> int:
    """Run the three sweeps, print and write the tables; with --json end with one JSON line."""
    run = run_sweep_pair(__doc__.splitlines()[0], argv, CONFIGS, "pal_variability", "pal_locality", "sia_philly",
                         "results/pal_variability", more=("pal_ablation",))
    args, main_results, sweep, out, t0 = run.args, run.main, run.second, run.out, run.started_s

    table = main_results.groupby("policy", sort=False).agg(
        geomean_jct_s=("geomean_jct_s", gmean), makespan_s=("makespan_s", "mean"),
        utilization=("utilization", "mean"), solve_p50_ms=("solve_p50_ms", "median")).round(3)
    reduction = reduction_vs(main_results)
    table["reduction_vs_packed_sticky"] = [reduction.get(p, 0.0) for p in table.index]
    table["published"] = [PUBLISHED_REDUCTION.get(p, np.nan) for p in table.index]
    locality = {float(lf): reduction_vs(part) for lf, part in sweep.groupby("across_node")}
    loc_table = pd.DataFrame(locality).T.rename_axis("across_node").round(3)
    ablation = run.more["pal_ablation"]
    semantics = ["work", "variability", "backfill"]
    abl_table = pd.DataFrame({combo: reduction_vs(part) for combo, part in ablation.groupby(semantics)}).T
    abl_table = abl_table.rename_axis(semantics).round(3)
    text = ("## Sia-Philly traces, 16 x 4 GPUs, L = 1.7\n\n" + table.to_markdown() +
            "\n\n## Geomean JCT reduction vs packed_sticky by locality penalty\n\n" + loc_table.to_markdown() +
            "\n\n## Geomean JCT reduction vs packed_sticky by simulator semantics (PAL's: iterations, measured, "
            "no backfill)\n\n" + abl_table.to_markdown() + "\n")
    (out / "table.md").write_text(text)
    print(text)
    if args.json:
        print(json_text({"geomean_jct_reduction_vs_packed_sticky": reduction,
                          "by_locality_penalty": {str(k): v for k, v in locality.items()},
                          "by_semantics": {"/".join(map(str, k)): v for k, v in abl_table.T.to_dict().items()},
                          "wall_s": time.perf_counter() - t0}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
