"""Tables and figures from a sweep's stored cells.

Tables: per trace (and load, cluster, round, model where they vary) and policy, the metric's
mean over seeds with a 95 % confidence interval (Student t; none with one seed), an "all"
row averaging the traces per seed, and the relative change of each policy's mean against the
baseline's; each metric in its unit and precision (UNITS), named in the headers. Figures (PNG
and PDF, each saying what it pools): the metric per policy with its 95 % CI over the cells, the
JCT CDF per load, mean JCT vs load with CIs over seeds (with several loads), utilization over
time of every cell, and the per-round solve time.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NamedTuple

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from scipy import stats

from schedlab.errors import ConfigError
from schedlab.io import spreadsheet_safe, text_table
from schedlab.io.outputs import OUTPUT_KINDS, folder_kind
from schedlab.sweep.config import cell_gpus, cell_key, load_sweep
from schedlab.sweep.run import CellStore, records_frame

__all__ = ["FORMATS", "UNITS", "Unit", "ci95", "header", "render", "report", "summary_table", "unit_of", "wide_table",
           "write_figures"]

FORMATS = ("md", "csv", "latex")
AXES = ("world", "load", "cluster", "round_s", "model", "across_node", "racks", "uplink_gbps", "variability", "order",
        "work", "backfill", "opt_in", "penalty_scale", "budget")


def ci95(values: pd.Series) -> float:
    """Half-width of the 95 % confidence interval of the mean of `values` (Student t).

    NaNs are left out; NaN when fewer than two values remain.
    """
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


class Unit(NamedTuple):
    """How tables and figures show a metric: its name, unit, scale and decimals."""

    label: str  # what the metric is, for headers
    unit: str  # "" for a ratio or a count
    scale: float  # shown value = stored value x scale
    decimals: int


# Each metric as a table shows it. A metric not listed shows its stored value, 3 decimals.
UNITS = {
    "mean_jct_s": Unit("mean JCT", "s", 1.0, 0),
    "p50_jct_s": Unit("median JCT", "s", 1.0, 0),
    "geomean_jct_s": Unit("geometric-mean JCT", "s", 1.0, 0),
    "p99_jct_s": Unit("99th-percentile JCT", "h", 1 / 3600, 2),
    "makespan_s": Unit("makespan", "h", 1 / 3600, 2),
    "utilization": Unit("GPU utilization", "", 1.0, 3),
    "ftf_mean": Unit("mean finish-time fairness", "", 1.0, 2),
    "ftf_max": Unit("worst finish-time fairness", "", 1.0, 2),
    "restarts_total": Unit("restarts", "", 1.0, 0),
    "solve_p50_ms": Unit("median solve time", "ms", 1.0, 1),
    "solve_p95_ms": Unit("95th-percentile solve time", "ms", 1.0, 1),
    "solve_max_ms": Unit("slowest solve", "ms", 1.0, 0),
    "penalty_mean": Unit("mean accuracy penalty", "", 1.0, 4),
    "penalty_max": Unit("largest accuracy penalty", "", 1.0, 4),
    "cpu_s": Unit("CPU time per replay", "s", 1.0, 1),
}


def unit_of(metric: str) -> Unit:
    """The metric's Unit (UNITS), or its stored value under its own name, to 3 decimals."""
    return UNITS.get(metric, Unit(metric.replace("_", " "), "", 1.0, 3))


def header(metric: str) -> str:
    """The metric's name in headers and axis labels, with its unit.

    Examples
    --------
    >>> header("p99_jct_s"), header("utilization"), header("queue_s")
    ('99th-percentile JCT (h)', 'GPU utilization', 'queue s')
    """
    u = unit_of(metric)
    return f"{u.label}{f' ({u.unit})' if u.unit else ''}"


def wide_table(long: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Rows: group; columns: policy, each 'mean ± ci' in the metric's unit and precision (and
    change vs baseline when given); the policy headers name the metric and its unit."""
    u = unit_of(metric)
    groups = [c for c in long.columns if c not in ("policy", "mean", "ci95", "n", "change_vs_baseline")]
    cells = long.assign(text=[_pm(m * u.scale, c * u.scale, u.decimals) for m, c in zip(long["mean"], long["ci95"])])
    table = cells.pivot(index=groups, columns="policy", values="text")
    if "change_vs_baseline" in long:
        change = long.pivot(index=groups, columns="policy", values="change_vs_baseline")
        for policy in change.columns:
            if change[policy].abs().max() > 0:
                table[f"{policy} vs base"] = change[policy].map(lambda v: f"{v:+.1%}")
    order = list(dict.fromkeys(long.policy))
    cols = [c for p in order for c in (p, f"{p} vs base") if c in table.columns]
    index = list(dict.fromkeys(long.set_index(groups).index))
    return table.loc[index, cols].rename(columns={p: f"{p}: {header(metric)}" for p in order})


def _pm(mean: float, ci: float, decimals: int) -> str:
    return f"{mean:.{decimals}f}" if np.isnan(ci) else f"{mean:.{decimals}f} ± {ci:.{decimals}f}"


def _metrics(frame: pd.DataFrame) -> list[str]:
    return [c for c in frame.columns if c.endswith(("_s", "_ms")) or c in ("utilization", "restarts_total")]


def render(long: pd.DataFrame, fmt: str, metric: str) -> str:
    """CSV: the long table at full precision (the metric in its stored unit, named in a column);
    Markdown and LaTeX (booktabs): the wide table, groups left-aligned, numbers right-aligned."""
    if fmt == "csv":
        return spreadsheet_safe(long.assign(metric=metric)).to_csv(index=False)
    table = wide_table(long, metric)
    text = text_table(table.reset_index(), fmt, [False] * table.index.nlevels + [True] * len(table.columns))
    note = f"{header(metric)}: mean ± 95 % CI over seeds (Student t), and the change against the baseline"
    return f"{text}\n\n{note}" if fmt == "md" else text.replace("±", "$\\pm$") + f"\n% {note}"


def report(out: str | Path, fmt: str = "md", figures: bool = False, baseline: str | None = None,
           metric: str | None = None) -> str:
    """The headline table of the sweep stored in `out` (written to out/table.<fmt>), and figures."""
    if fmt not in FORMATS:
        raise ConfigError(f"format {fmt!r}: use one of {', '.join(FORMATS)}")
    out = Path(out)
    kind = folder_kind(out)
    if kind is not None and kind is not OUTPUT_KINDS["sweep"]:
        raise ConfigError(f"{out} is a {kind.name}'s output folder, not a sweep's: give report the --out of a sweep")
    if kind is None:
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
    metric = metric or sweep.metric
    if len(records) < len(order):
        print(f"report: {len(order) - len(records)} of {len(order)} cells of {out}/sweep.toml are not finished; the "
              f"table is of the {len(records)} that are (run `schedlab sweep {out}/sweep.toml --out {out}` for the rest)",
              file=sys.stderr)
    long = summary_table(frame, metric, baseline or sweep.baseline)
    text = render(long, fmt, metric)
    (out / f"table.{fmt}").write_text(text + "\n")
    if figures:
        write_figures(records, frame, out / "figures", metric)
    return text


def write_figures(records: list[dict], frame: pd.DataFrame, folder: Path, metric: str = "mean_jct_s") -> list[Path]:
    """The figures, each saying what it pools: the headline metric per policy with its 95 % CI,
    the JCT CDF (one panel per load), mean JCT vs load with CIs (only with several loads),
    utilization over time of every cell, and the per-round solve time."""
    folder.mkdir(parents=True, exist_ok=True)
    policies = list(dict.fromkeys(frame.policy))
    by_policy = {p: [r for r in records if r["cell"]["policy"]["label"] == p] for p in policies}
    replicates = f"{_count(frame.trace.nunique(), 'trace')} x {_count(frame.seed.nunique(), 'seed')}"
    paths = []

    u = unit_of(metric)
    fig, ax = plt.subplots(figsize=(4.5, 3.2))
    per_policy = frame.groupby("policy", sort=False)[metric]
    means, cis = per_policy.mean() * u.scale, per_policy.agg(ci95) * u.scale
    ax.bar(range(len(policies)), means[policies], yerr=cis[policies].fillna(0.0), capsize=3, color="0.6")
    ax.set_xticks(range(len(policies)), policies, rotation=30, ha="right")
    ax.set_ylabel(header(metric))
    ax.set_title(f"{u.label}: mean and 95 % CI\nover the cells ({replicates})", fontsize=9)
    paths += _save(fig, folder / "headline")

    loads = sorted(frame["load"].unique())
    fig, axes = plt.subplots(1, len(loads), figsize=(4.5 * len(loads), 3.2), squeeze=False)
    for ax, load in zip(axes[0], loads):
        for p in policies:
            cells = [r for r in by_policy[p] if r["cell"]["load"] == load]
            jct = np.sort(np.concatenate([r["jct_s"] for r in cells]))
            ax.plot(jct / 3600, np.arange(1, len(jct) + 1) / len(jct), label=p)
        ax.set(xscale="log", xlabel="job completion time (h)", ylabel="fraction of jobs")
        ax.set_title(f"JCT CDF, load {load:g}\n(the jobs of {replicates} pooled)", fontsize=9)
    axes[0][0].legend(fontsize=8)
    paths += _save(fig, folder / "jct_cdf")

    if len(loads) > 1:  # a single load has no curve to draw
        fig, ax = plt.subplots(figsize=(4.5, 3.2))
        per_seed = frame.groupby(["policy", "load", "seed"]).mean_jct_s.mean() / 3600
        stats_by = per_seed.groupby(["policy", "load"]).agg(["mean", ci95])
        for p in policies:
            ax.errorbar(stats_by.loc[p].index, stats_by.loc[p]["mean"], yerr=stats_by.loc[p]["ci95"].fillna(0.0),
                        marker="o", capsize=3, label=p)
        ax.set(xlabel="load (x the trace's arrival rate)", ylabel="mean JCT (h)")
        ax.set_title(f"Mean JCT vs load (traces averaged)\n95 % CI over {_count(frame.seed.nunique(), 'seed')}",
                     fontsize=9)
        ax.legend(fontsize=8)
        paths += _save(fig, folder / "jct_vs_load")

    fig, ax = plt.subplots(figsize=(4.5, 3.2))
    colors = {p: f"C{i}" for i, p in enumerate(policies)}
    for p in policies:
        for i, r in enumerate(by_policy[p]):
            gpus = cell_gpus(r["cell"])
            t = np.asarray(r["rounds"]["time_s"]) / 3600
            used = pd.Series(r["rounds"]["gpus_used"]).rolling(30, min_periods=1).mean() / gpus
            ax.plot(t, used, color=colors[p], alpha=0.5, linewidth=0.8, label=p if i == 0 else None)
    ax.set(xlabel="time (h)", ylabel="GPUs in use (fraction, 30-round mean)", ylim=(0, 1.05))
    ax.set_title(f"Utilization, every cell\n({len(records)} cells: {replicates} x the policies)", fontsize=9)
    ax.legend(fontsize=8)
    paths += _save(fig, folder / "utilization")

    fig, ax = plt.subplots(figsize=(4.5, 3.2))
    data = [np.maximum(np.concatenate([r["rounds"]["solve_ms"] for r in by_policy[p]]), 1e-3) for p in policies]
    ax.boxplot(data, tick_labels=policies, showfliers=False)
    ax.set(yscale="log", ylabel="solve time per round (ms)")
    ax.set_title(f"Per-round solve time\n(the rounds of {replicates} pooled)", fontsize=9)
    paths += _save(fig, folder / "solve_time")
    return paths


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' * (n != 1)}"


def _save(fig, stem: Path) -> list[Path]:
    fig.tight_layout()
    paths = [stem.with_suffix(".png"), stem.with_suffix(".pdf")]
    for path in paths:
        fig.savefig(path, dpi=150)
    plt.close(fig)
    return paths
