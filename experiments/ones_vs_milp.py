"""ONES-style evolutionary search against the exact round MILP.

(a) Quality per round: rounds recorded from a pollux replay of one workload (16 x 4 GPUs)
    are solved by the MILP (the optimum) and by the search on equal terms (MILP fitness, best
    batch, the same configuration space) under per-round budgets of 10, 100 and 1000 ms,
    setup included. The search's objective as a fraction of the optimum: objectives are
    negative for p < 0, so the fraction is optimum / found (1 = optimal). The optimum bounds
    the search; exceeding it would be a bug, and the script fails if it happens.
(b) Mean JCT over the Pollux workloads of ones, pollux (MILP), tiresias and optimus, and the
    change of ones against each next to the ONES artifact's (-53 % vs Optimus, -57 % vs
    Tiresias).
Part (b) is the sweep experiments/configs/ones_vs_milp.toml (resumable: cells under
--out/cells). Writes quality.csv, jct.csv, table.md and ones_vs_milp.{png,pdf} to --out.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from schedlab.api import solve_round
from schedlab.bench.sweeps import workload_results
from schedlab.io import json_text
from schedlab.policies import Policy
from schedlab.policies.evolutionary import Evolution, EvolutionConfig
from schedlab.policies.goodput import PolluxPolicy
from schedlab.sim.engine import replay
from schedlab.sim.world import ReplayConfig
from schedlab.state import RoundInput, RoundResult
from schedlab.traces import load_workload, trace_jobs

CONFIG = Path(__file__).parent / "configs" / "ones_vs_milp.toml"  # part (b)'s sweep
BUDGETS_MS = (10, 100, 1000)
JCT_POLICIES = ("ones", "pollux", "tiresias", "optimus")
ONES_ARTIFACT_CHANGE = {"optimus": -0.53, "tiresias": -0.57}  # ONES (SC'21) artifact, 50 jobs


@dataclass
class Recorder:
    """A policy that delegates to another and keeps every k-th round's input (2+ jobs)."""

    inner: Policy
    every: int
    rounds: list[RoundInput] = field(default_factory=list)
    seen: int = 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def schedule(self, round_input: RoundInput) -> RoundResult:
        if self.seen % self.every == 0 and len(round_input.jobs) > 1:
            self.rounds.append(round_input)
        self.seen += 1
        return self.inner.schedule(round_input)


def record_rounds(workload: str, every: int) -> list[RoundInput]:
    """Rounds as the pollux policy sees them, with its settings."""
    pollux = PolluxPolicy()
    recorder = Recorder(pollux, every)
    replay(trace_jobs(load_workload(workload)), recorder, ReplayConfig())
    return [replace(r, settings=pollux.settings) for r in recorder.rounds]


def quality(rounds: list[RoundInput], budgets_ms=BUDGETS_MS, seed: int = 0) -> pd.DataFrame:
    """One row per round and budget: the MILP optimum, the search's best, both times."""
    rows = []
    for k, ri in enumerate(rounds):
        exact = solve_round(ri)
        for budget_ms in budgets_ms:
            cfg = EvolutionConfig(fitness="milp", batch_rule="best", cap_growth=False, generations=10**9,
                                  time_budget_ms=budget_ms)
            t0 = time.perf_counter()
            chosen, _, vals, generations = Evolution(cfg, np.random.default_rng(seed + k)).search(ri)
            search_ms = 1e3 * (time.perf_counter() - t0)
            found = float(sum(vals.objective[c] if c >= 0 else vals.opts.U0[j] for j, c in enumerate(chosen)))
            if exact.status == "optimal" and found > exact.objective + 1e-6 * abs(exact.objective):
                raise AssertionError(f"round {k}: search {found} above the MILP optimum {exact.objective}")
            rows.append({"round": k, "jobs": len(ri.jobs), "budget_ms": budget_ms,
                         "milp_objective": exact.objective, "milp_status": exact.status,
                         "milp_ms": 1e3 * (exact.build_s + exact.solve_s), "search_objective": found,
                         "generations": generations, "search_ms": search_ms,
                         "fraction": exact.objective / found if found < 0 else found / exact.objective})
    return pd.DataFrame(rows)


def quality_curve(q: pd.DataFrame) -> pd.DataFrame:
    return q.groupby("budget_ms").agg(mean_fraction=("fraction", "mean"), worst_fraction=("fraction", "min"),
                                      generations=("generations", "mean"), search_ms=("search_ms", "median"),
                                      milp_ms=("milp_ms", "median"))


def jct_table(jct: pd.DataFrame) -> pd.DataFrame:
    tab = jct.pivot(index="workload", columns="policy", values="mean_jct_s")
    tab = tab.loc[sorted(tab.index, key=lambda w: int(w.split("-")[1]))]
    tab.loc["mean"] = tab.mean()
    return tab.round(0)


def ones_change(tab: pd.DataFrame) -> dict[str, float]:
    """Mean JCT of ones relative to each other policy (-0.5 = half)."""
    mean = tab.loc["mean"]
    return {p: float(mean["ones"] / mean[p] - 1) for p in tab.columns if p != "ones"}


def figure(curve: pd.DataFrame, tab: pd.DataFrame, path: Path) -> None:
    fig, (left, right) = plt.subplots(1, 2, figsize=(8, 3))
    left.plot(curve.index, curve.mean_fraction, marker="o", label="mean over rounds")
    left.plot(curve.index, curve.worst_fraction, marker="x", linestyle="--", label="worst round")
    left.set_xscale("log")
    left.set_xlabel("search budget per round (ms)")
    left.set_ylabel("fraction of the MILP optimum")
    left.set_title("(a) search quality, 64 GPUs")
    left.legend()
    mean = tab.loc["mean"].reindex(list(JCT_POLICIES))
    right.bar(mean.index, mean.values, color=["C1", "C0", "C7", "C7"])
    right.set_ylabel("mean JCT (s)")
    right.set_title("(b) 8 Pollux workloads")
    fig.tight_layout()
    for suffix in (".png", ".pdf"):
        fig.savefig(path.with_suffix(suffix), dpi=150)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    """Measure (a) and run (b), print and write the tables and the figure; --json: one JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=CONFIG, help="the JCT sweep config (TOML)")
    parser.add_argument("--record-workload", default="workload-6", help="workload whose pollux rounds are recorded")
    parser.add_argument("--every", type=int, default=50, help="record every k-th round")
    parser.add_argument("--workloads", default=None, help="comma-separated, for the JCT table (default: the config's)")
    parser.add_argument("--processes", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--out", default="results/ones_vs_milp")
    parser.add_argument("--json", action="store_true", help="end with one JSON line: mean JCT and quality per budget")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    t0 = time.perf_counter()
    q = quality(record_rounds(args.record_workload, args.every))
    curve = quality_curve(q)
    print(f"(a) {q['round'].nunique()} rounds of {args.record_workload}, {q.jobs.min()}-{q.jobs.max()} jobs "
          f"({time.perf_counter() - t0:.0f} s)\n" + curve.round(4).to_markdown())

    jct = workload_results(args.config, out, args.processes, args.workloads.split(",") if args.workloads else None)
    q.to_csv(out / "quality.csv", index=False)  # after the sweep has taken the folder (io.outputs)
    jct.to_csv(out / "jct.csv", index=False)
    tab = jct_table(jct)
    change = ones_change(tab)
    lines = [f"ones vs {p}: {c:+.1%}" + (f" (ONES artifact {ONES_ARTIFACT_CHANGE[p]:+.0%})" if p in ONES_ARTIFACT_CHANGE else "")
             for p, c in change.items()]
    print("\n(b) mean JCT (s)\n" + tab.to_markdown() + "\n" + "\n".join(lines))
    (out / "table.md").write_text("## (a) search quality vs budget\n\n" + curve.round(4).to_markdown()
                                  + "\n\n## (b) mean JCT (s)\n\n" + tab.to_markdown() + "\n\n" + "\n".join(lines) + "\n")
    figure(curve, tab, out / "ones_vs_milp")
    if args.json:
        print(json_text({"mean_jct_s": {p: float(tab.loc["mean", p]) for p in tab.columns},
                          "quality_vs_milp": {str(b): float(f) for b, f in curve.mean_fraction.items()},
                          "ones_jct_change": change, "wall_s": time.perf_counter() - t0}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
