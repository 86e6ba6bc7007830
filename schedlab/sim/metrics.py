"""The summary of a replay: JCT statistics, makespan, utilization, fairness, restarts, solve times.

finish-time fairness (Themis, NSDI'20, adapted): rho_j = JCT_j / the time job j needs alone
at the GPUs and batch its user asked for (packed on the fewest nodes, no restart); rho < 1
means the scheduler did better for the job than its own request on an empty cluster.
utilization: GPU-seconds held by jobs (restart delays included) over all GPU-seconds between
the first arrival and the last completion. On a cluster of several GPU types, utilization_<type>:
the GPU-seconds of that type the rounds allocated (each round's GPUs held until the next round)
over the type's GPU-seconds from the first round to the last.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pandas as pd

__all__ = ["summarize", "utilization_by_type"]


def _percentile(values: pd.Series, q: float) -> float:
    values = values.dropna()
    return float(np.percentile(values, q)) if len(values) else math.nan


def utilization_by_type(rounds: pd.DataFrame, gpus_by_type: Mapping[str, int]) -> dict[str, float]:
    """utilization_<type> of each GPU type (module docstring), from the rounds' gpus_used_<type>.

    Parameters
    ----------
    rounds
        One row per round, with time_s and a gpus_used_<type> column per type.
    gpus_by_type
        The cluster's GPUs of each type.

    Returns
    -------
    dict
        utilization_<type> -> the share of the type's GPU-seconds allocated; NaN where the rounds
        span no time.

    Examples
    --------
    >>> rounds = pd.DataFrame({"time_s": [0.0, 60.0, 120.0], "gpus_used_v100": [4, 2, 0], "gpus_used_k80": [0, 4, 0]})
    >>> utilization_by_type(rounds, {"v100": 4, "k80": 8})
    {'utilization_v100': 0.75, 'utilization_k80': 0.25}
    """
    held_s = np.diff(rounds.time_s.to_numpy(), append=rounds.time_s.iloc[-1]) if len(rounds) else np.zeros(0)
    span_s = float(held_s.sum())
    return {f"utilization_{t}": float(rounds[f"gpus_used_{t}"].to_numpy() @ held_s / (gpus * span_s)) if span_s > 0
            else math.nan for t, gpus in gpus_by_type.items()}


def summarize(jobs: pd.DataFrame, rounds: pd.DataFrame, total_gpus: int, end_s: float,
              gpus_by_type: Mapping[str, int] | None = None) -> dict:
    """The replay's summary metrics, from its job and round tables (sim.engine.ReplayResult).

    Parameters
    ----------
    jobs, rounds
        One row per job and one per round, as ReplayResult holds them.
    total_gpus
        The cluster's GPUs, the denominator of utilization.
    end_s
        When the replay stopped: the makespan's end when no job finished.
    gpus_by_type
        A mixed cluster's GPUs of each type, whose rounds carry gpus_used_<type>: adds
        utilization_<type> (module docstring). None: the cluster has one type.

    Returns
    -------
    dict
        The jobs in the trace and those finished; JCT statistics over the finished ones (mean,
        median, geometric mean, 99th percentile, in s); makespan_s (first arrival to last
        completion); utilization and finish-time fairness (module docstring); the restarts and
        rounds; the rounds' solve times (median, 95th percentile and slowest, in ms) and the
        rounds that fell back or hit the time limit; utilization_<type> with `gpus_by_type`.
        The JCT and fairness statistics are NaN when no job finished.
    """
    done = jobs.dropna(subset=["jct_s"])
    first = float(jobs.submit_s.min())
    last = float(done.completion_s.max()) if len(done) else end_s
    makespan = last - first
    jct = done.jct_s
    return {
        "jobs_total": int(len(jobs)),
        "jobs_completed": int(len(done)),
        "mean_jct_s": float(jct.mean()) if len(done) else math.nan,
        "p50_jct_s": float(jct.median()) if len(done) else math.nan,
        "geomean_jct_s": float(np.exp(np.log(jct).mean())) if len(done) else math.nan,  # no scipy.stats import (1 s)
        "p99_jct_s": float(np.percentile(jct, 99)) if len(done) else math.nan,
        "makespan_s": makespan,
        "utilization": float(jobs.attained_gpu_s.sum() / (total_gpus * makespan)) if makespan > 0 else math.nan,
        "ftf_mean": float(done.ftf.mean()) if len(done) else math.nan,
        "ftf_max": float(done.ftf.max()) if len(done) else math.nan,
        "restarts_total": int(jobs.restarts.sum()),
        "rounds": int(len(rounds)),
        "solve_p50_ms": _percentile(rounds.solve_ms, 50),
        "solve_p95_ms": _percentile(rounds.solve_ms, 95),
        "solve_max_ms": _percentile(rounds.solve_ms, 100),
        "fallback_rounds": int((rounds.status == "fallback").sum()),
        "time_limit_rounds": int((rounds.status == "time_limit").sum()),
    } | (utilization_by_type(rounds, gpus_by_type) if gpus_by_type else {})
