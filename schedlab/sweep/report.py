"""Tables and figures from a sweep's stored cells.

Tables: per trace (and load, cluster, round, model where they vary) and policy, the metric's
mean over seeds with a 95 % confidence interval (Student t; none with one seed), an "all"
row averaging the traces per seed, and the relative change of each policy's mean against the
baseline's. Figures (PNG and PDF): JCT CDF per policy, mean JCT vs load, GPU utilization
over time, per-round solve time distribution.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from scipy import stats
from tabulate import tabulate

from schedlab.errors import ConfigError
from schedlab.io import spreadsheet_safe
from schedlab.sweep.config import cell_key, load_sweep, trace_label
from schedlab.sweep.run import CellStore, records_frame

FORMATS = ("md", "csv", "latex")
AXES = ("world", "load", "cluster", "round_s", "model", "across_node", "racks", "uplink_gbps", "variability", "order",
        "work", "backfill", "opt_in", "penalty_scale", "budget")


def ci95(values: pd.Series) -> float:
    n = values.count()
    return float(stats.t.ppf(0.975, n - 1) * values.std(ddof=1) / np.sqrt(n)) if n > 1 else float("nan")


def summary_table(frame: pd.DataFrame, metric: str, baseline: str | None) -> pd.DataFrame:
    """Long table: group (trace + varying axes), policy, mean, ci95, n, change vs baseline."""
    if metric not in frame.columns:
        raise ConfigError(f"metric {metric!r} is not in the results; use one of {', '.join(_metrics(frame))}")
    groups = ["trace"] + [a for a in AXES if frame[a].nunique() > 1]
    per_seed = frame.groupby(groups + ["policy", "seed"], sort=False)[metric].mean().reset_index()
    every = per_seed.groupby([g for g in groups if g != "trace"] + ["policy", "seed"], sort=False)[metric].mean()
    every = every.reset_index().assign(trace="all")
    both = pd.concat([per_seed, every], ignore_index=True)
    out = both.groupby(groups + ["policy"], sort=False)[metric].agg(mean="mean", ci95=ci95, n="count").reset_index()
    if baseline is not None:
        if baseline not in set(out.policy):
            raise ConfigError(f"baseline {baseline!r} is not among the policies {sorted(set(out.policy))}")
        base = out[out.policy == baseline].set_index(groups)["mean"]
        out["change_vs_baseline"] = out["mean"].to_numpy() / base.reindex(out.set_index(groups).index).to_numpy() - 1
    return out


def wide_table(long: pd.DataFrame, decimals: int = 0) -> pd.DataFrame:
    """Rows: group; columns: policy, each 'mean ± ci' (and change vs baseline when given)."""
    groups = [c for c in long.columns if c not in ("policy", "mean", "ci95", "n", "change_vs_baseline")]
    cells = long.assign(text=[_pm(m, c, decimals) for m, c in zip(long["mean"], long["ci95"])])
    table = cells.pivot(index=groups, columns="policy", values="text")
    if "change_vs_baseline" in long:
        change = long.pivot(index=groups, columns="policy", values="change_vs_baseline")
        for policy in change.columns:
            if change[policy].abs().max() > 0:
                table[f"{policy} vs base"] = change[policy].map(lambda v: f"{v:+.1%}")
    order = list(dict.fromkeys(long.policy))
    cols = [c for p in order for c in (p, f"{p} vs base") if c in table.columns]
    index = list(dict.fromkeys(long.set_index(groups).index))
    return table.loc[index, cols]


def _pm(mean: float, ci: float, decimals: int) -> str:
    return f"{mean:.{decimals}f}" if np.isnan(ci) else f"{mean:.{decimals}f} ± {ci:.{decimals}f}"


def _metrics(frame: pd.DataFrame) -> list[str]:
    return [c for c in frame.columns if c.endswith(("_s", "_ms")) or c in ("utilization", "restarts_total")]


def render(long: pd.DataFrame, fmt: str) -> str:
    if fmt == "csv":
        return spreadsheet_safe(long).to_csv(index=False)
    wide = wide_table(long)
    if fmt == "md":
        return tabulate(wide.reset_index(), headers="keys", tablefmt="github", showindex=False)
    latex = tabulate(wide.reset_index(), headers="keys", tablefmt="latex_booktabs", showindex=False)
    return latex.replace("±", "$\\pm$")


def report(out: str | Path, fmt: str = "md", figures: bool = False, baseline: str | None = None,
           metric: str | None = None) -> str:
    """The headline table of the sweep stored in `out` (written to out/table.<fmt>), and figures."""
    if fmt not in FORMATS:
        raise ConfigError(f"format {fmt!r}: use one of {', '.join(FORMATS)}")
    out = Path(out)
    if not (out / "sweep.toml").exists():
        raise ConfigError(f"{out} holds no sweep (no sweep.toml): run `schedlab sweep CONFIG --out {out}` first")
    sweep = load_sweep(out / "sweep.toml")
    order = {cell_key(c): i for i, c in enumerate(sweep.cells)}  # the config's cells, in its order
    store = CellStore(out)
    if corrupt := store.corrupt():
        raise ConfigError(f"{len(corrupt)} cell files under {store.dir} are not whole records (e.g. {corrupt[0].name}, "
                          f"cut short or emptied): run `schedlab sweep {out}/sweep.toml --out {out}` to run them again")
    records = sorted(store.records(set(order)), key=lambda r: order[r["key"]])
    if not records:
        raise ConfigError(f"{out}/cells holds no finished cells of {out}/sweep.toml yet")
    frame = records_frame(records)
    long = summary_table(frame, metric or sweep.metric, baseline or sweep.baseline)
    text = render(long, fmt)
    (out / f"table.{fmt}").write_text(text + "\n")
    if figures:
        write_figures(records, frame, out / "figures")
    return text


def write_figures(records: list[dict], frame: pd.DataFrame, folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    policies = list(dict.fromkeys(frame.policy))
    by_policy = {p: [r for r in records if r["cell"]["policy"]["label"] == p] for p in policies}
    paths = []

    fig, ax = plt.subplots(figsize=(4.5, 3.2))
    for p in policies:
        jct = np.sort(np.concatenate([r["jct_s"] for r in by_policy[p]]))
        ax.plot(jct / 3600, np.arange(1, len(jct) + 1) / len(jct), label=p)
    ax.set(xscale="log", xlabel="job completion time (h)", ylabel="fraction of jobs", title="JCT CDF")
    ax.legend(fontsize=8)
    paths += _save(fig, folder / "jct_cdf")

    fig, ax = plt.subplots(figsize=(4.5, 3.2))
    load = frame.groupby(["policy", "load", "seed"]).mean_jct_s.mean().groupby(["policy", "load"]).mean()
    for p in policies:
        ax.plot(load[p].index, load[p].values / 3600, marker="o", label=p)
    ax.set(xlabel="load (x the trace's arrival rate)", ylabel="mean JCT (h)", title="Mean JCT vs load")
    ax.legend(fontsize=8)
    paths += _save(fig, folder / "jct_vs_load")

    fig, ax = plt.subplots(figsize=(4.5, 3.2))
    for p in policies:  # the first cell of each policy, in config order: the same trace for all
        r = by_policy[p][0]
        gpus = r["cell"]["nodes"] * r["cell"]["gpus_per_node"]
        t = np.asarray(r["rounds"]["time_s"]) / 3600
        used = pd.Series(r["rounds"]["gpus_used"]).rolling(30, min_periods=1).mean() / gpus
        ax.plot(t, used, label=p, linewidth=1)
    ax.set(xlabel="time (h)", ylabel="GPUs in use (fraction, 30-round mean)",
           title=f"Utilization, {trace_label(by_policy[policies[0]][0]['cell']['trace'])}", ylim=(0, 1.05))
    ax.legend(fontsize=8)
    paths += _save(fig, folder / "utilization")

    fig, ax = plt.subplots(figsize=(4.5, 3.2))
    data = [np.maximum(np.concatenate([r["rounds"]["solve_ms"] for r in by_policy[p]]), 1e-3) for p in policies]
    ax.boxplot(data, tick_labels=policies, showfliers=False)
    ax.set(yscale="log", ylabel="solve time per round (ms)", title="Per-round solve time")
    paths += _save(fig, folder / "solve_time")
    return paths


def _save(fig, stem: Path) -> list[Path]:
    fig.tight_layout()
    paths = [stem.with_suffix(".png"), stem.with_suffix(".pdf")]
    for path in paths:
        fig.savefig(path, dpi=150)
    plt.close(fig)
    return paths
