"""Pollux's throughput model, its fit to measurements, and lookup in measured tables.

Model (Qiao et al., OSDI'21, section 3.2), for a job on `r` GPUs over `n` nodes with per-GPU
micro-batch `m` and `s` extra gradient-accumulation steps:

    T_c(m)       = alpha_c + beta_c * m                        compute time of one micro-step
    T_n(n, r)    = alpha_n + beta_n * max(r - 2, 0)   if n > 1  sync time across nodes
                 = alpha_r + beta_r * max(r - 2, 0)   if n = 1, r > 1
                 ~ 0                                  if r = 1
    T_iter       = s * T_c + (T_c^gamma + T_n^gamma)^(1/gamma)  one optimizer step
    throughput   = r * m * (s + 1) / T_iter                    examples per second

The fit minimizes, as Pollux does, the RMS log error of the compute time (step - sync) plus
that of the step time, with small regularizers pulling gamma towards 1 and beta/alpha towards
0; parameters with no data behind them are pinned. What we changed: scipy's bounded L-BFGS-B
over log-parameters with seeded multi-start, instead of one autograd-driven start (driven by
models.lbfgsb: scipy's routine without minimize's wrapper, the same iterates).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import astuple
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from schedlab.state import ThroughputParams

if TYPE_CHECKING:  # pandas and scipy load when a table is read or a fit runs, not for a round
    from pathlib import Path

    import pandas as pd
    from numpy.typing import ArrayLike
    from scipy.interpolate import LinearNDInterpolator, interp1d

__all__ = ["MeasuredTable", "canonical_placement", "compute_time_s", "fit_throughput_params", "params_to_list", "rmsle",
           "step_time_s", "sync_time_s", "throughput"]

_TINY = 1e-8  # Pollux's stand-in for "no sync cost"; keeps logs and powers finite.


def compute_time_s(params: ThroughputParams, local_bsz: ArrayLike) -> np.ndarray:
    """T_c = alpha_c + beta_c * m: seconds of one forward and backward micro-step on one GPU.

    Linear in the micro-batch m (examples): a fixed cost per step plus a cost per example.
    """
    return params.alpha_c + params.beta_c * np.asarray(local_bsz, dtype=float)


def sync_time_s(params: ThroughputParams, num_nodes: ArrayLike, num_replicas: ArrayLike) -> np.ndarray:
    """T_n: seconds of the gradient all-reduce of one optimizer step.

    alpha + beta * max(r - 2, 0) with the slowest link's parameters: the network's (alpha_n,
    beta_n) when the job spans nodes, the node's bus (alpha_r, beta_r: PCIe or NVLink) when
    r > 1 GPUs share one node, and ~0 (1e-8) on one GPU.
    """
    num_nodes = np.asarray(num_nodes)
    num_replicas = np.asarray(num_replicas)
    conds = [num_nodes > 1, num_replicas > 1]
    alpha = np.select(conds, [params.alpha_n, params.alpha_r], _TINY)
    beta = np.select(conds, [params.beta_n, params.beta_r], _TINY)
    return alpha + beta * np.maximum(num_replicas - 2, _TINY)


def _overlap_time_s(gamma: float, compute_s, sync_s):
    """(T_c^gamma + T_n^gamma)^(1/gamma): compute and sync partly overlapped."""
    return (compute_s**gamma + sync_s**gamma) ** (1.0 / gamma)


def step_time_s(params: ThroughputParams, num_nodes: ArrayLike, num_replicas: ArrayLike, local_bsz: ArrayLike,
                accum_steps: ArrayLike = 0) -> np.ndarray:
    """Pollux's step time: seconds of one optimizer step.

        T_iter = s * T_c + (T_c^gamma + T_n^gamma)^(1/gamma)

    The s accumulation micro-steps compute alone; the last one's backward pass overlaps the
    all-reduce, by an amount gamma sets (gamma = 1: no overlap, the times add; gamma -> inf:
    full overlap, the longer one counts). Pollux, OSDI'21, section 3.2.

    Parameters
    ----------
    params : ThroughputParams
        The fitted model of the job on the GPUs' type (floats, or arrays aligned with the shapes).
    num_nodes, num_replicas : array_like
        Nodes spanned and GPUs (data-parallel replicas).
    local_bsz : array_like
        Micro-batch m per GPU, in examples.
    accum_steps : array_like, default 0
        Extra gradient-accumulation micro-steps s.

    Returns
    -------
    ndarray
        Seconds per optimizer step.

    Examples
    --------
    cifar10's fitted model (Pollux artifact, T4 GPUs) at 128 examples per GPU, on one GPU, four
    of one node and eight over two nodes: the sync time grows from 0 to 35 ms and 138 ms, the
    step time by only 5 ms and 66 ms (gamma ~2.07 overlaps much of the sync with the backward pass):

    >>> from schedlab.models.profiles import shipped_profiles
    >>> p = shipped_profiles()["cifar10"].params
    >>> shapes = [(1, 1), (1, 4), (2, 8)]
    >>> [round(float(sync_time_s(p, n, r)), 4) for n, r in shapes]
    [0.0, 0.0346, 0.138]
    >>> [round(float(step_time_s(p, n, r, 128)), 4) for n, r in shapes]
    [0.1071, 0.112, 0.1727]
    >>> [round(float(throughput(p, n, r, 128))) for n, r in shapes]  # examples per second
    [1195, 4573, 5931]
    """
    t_c = compute_time_s(params, local_bsz)
    t_n = sync_time_s(params, num_nodes, num_replicas)
    return np.asarray(accum_steps) * t_c + _overlap_time_s(params.gamma, t_c, t_n)


def throughput(params: ThroughputParams, num_nodes: ArrayLike, num_replicas: ArrayLike, local_bsz: ArrayLike,
               accum_steps: ArrayLike = 0) -> np.ndarray:
    """Training examples per second: r * m * (s + 1) / T_iter (see `step_time_s`)."""
    total_bsz = np.asarray(num_replicas) * np.asarray(local_bsz) * (np.asarray(accum_steps) + 1)
    return total_bsz / step_time_s(params, num_nodes, num_replicas, local_bsz, accum_steps)


def rmsle(predicted: ArrayLike, measured: ArrayLike) -> float:
    """Root mean squared log error, sqrt(mean((log predicted - log measured)^2)): ~ relative error."""
    return float(np.sqrt(np.mean((np.log(predicted) - np.log(measured)) ** 2)))


def fit_throughput_params(
    num_nodes: ArrayLike, num_replicas: ArrayLike, local_bsz: ArrayLike, step_time: ArrayLike, sync_time: ArrayLike,
    rng: np.random.Generator | None = None, restarts: int = 8, start: ThroughputParams | None = None,
    floor_s: float = _TINY,
) -> ThroughputParams:
    """Fit the 7 parameters to measured (nodes, replicas, local batch, step, sync) points.

    Minimizes the loss of the module docstring. Parameters the points cannot identify are
    pinned: alpha_c at half the mean compute time when one batch size was measured, the
    network's (alpha_n, beta_n) without multi-node points, the node's (alpha_r, beta_r) without
    multi-GPU single-node points, the two sync betas without points on more than 2 GPUs. Without
    multi-node points the network is then set no faster than the node's bus (Pollux's prior).

    We search log(alpha, beta) so that parameters spanning six orders of magnitude are equally
    easy to move, and restart from `restarts` seeded random points besides Pollux's own start:
    from that start alone the ncf fit stalls at RMSLE 0.29 where 0.13 exists.

    Parameters
    ----------
    num_nodes, num_replicas, local_bsz : array_like
        Each point's shape and micro-batch.
    step_time, sync_time : array_like
        Each point's measured seconds per optimizer step (no accumulation) and of its all-reduce.
    rng : numpy.random.Generator, optional
        Draws the restarts (default: seeded with 0, so fits are reproducible).
    restarts : int, default 8
        Random starts besides Pollux's.
    start : ThroughputParams, optional
        Tried first (e.g. the previous fit, when one point was added online).
    floor_s : float, default 1e-8
        The least each of the six time parameters may be: Pollux's 1e-8 s (the replays' online
        fits keep it). A fast GPU goes below it: an H100 steps NCF at 2.7 ns a sample.

    Returns
    -------
    ThroughputParams
        The best fit over all starts, as Python floats.
    """
    rng = rng if rng is not None else np.random.default_rng(0)
    n = np.asarray(num_nodes, dtype=float)
    r = np.asarray(num_replicas, dtype=float)
    m = np.asarray(local_bsz, dtype=float)
    step = np.asarray(step_time, dtype=float)
    compute = np.maximum(step - np.asarray(sync_time, dtype=float), _TINY)

    pinned: dict[int, float] = {}
    if len(np.unique(m)) == 1:  # one batch size cannot separate alpha_c from beta_c
        pinned[0] = float(np.mean(compute)) / 2
    if not np.any(n > 1):
        pinned |= {2: _TINY, 3: _TINY}
    if not np.any((n == 1) & (r > 1)):
        pinned |= {4: _TINY, 5: _TINY}
    if not np.any(r > 2):
        pinned |= {3: _TINY, 5: _TINY}
    free = [i for i in range(7) if i not in pinned]

    base = np.array([np.log(1e-1), np.log(1e-2)] * 3 + [1.0])
    for i, v in pinned.items():
        base[i] = np.log(v) if i < 6 else v

    def unpack(z: np.ndarray) -> np.ndarray:
        """(alpha_c, beta_c, alpha_n, beta_n, alpha_r, beta_r, gamma) from the free log-parameters."""
        full = base.copy()
        full[free] = z
        full[:6] = np.exp(full[:6])
        return full

    # The loss runs hundreds of times per fit, on a few points each: numpy's per-call cost is
    # most of it. So sync_time_s's case split is precomputed as an index and as masks, every
    # logarithm is taken once, and the scalars are Python floats (the same IEEE doubles, a
    # tenth of numpy's scalar cost). Each value and gradient is bit-identical to the plain
    # transcription's (so are the replays that fit online).
    multi = (n > 1).astype(float)
    local = ((n == 1) & (r > 1)).astype(float)
    case = np.where(n > 1, 0, np.where(local > 0, 1, 2))  # network, node-local, alone
    extra = np.maximum(r - 2, _TINY)
    log_compute, log_step = np.log(compute), np.log(step)
    count = float(len(step))

    def loss_and_grad(z: np.ndarray) -> tuple[float, np.ndarray]:
        """The loss and its exact gradient in the free (log-)parameters."""
        a_c, b_c, a_n, b_n, a_r, b_r, gamma = unpack(z).tolist()
        slope_c = b_c * m
        t_c = a_c + slope_c
        t_n = np.array([a_n, a_r, _TINY])[case] + np.array([b_n, b_r, _TINY])[case] * extra
        pow_c, pow_n = t_c**gamma, t_n**gamma
        total = pow_c + pow_n
        log_c, log_n, log_total = np.log(t_c), np.log(t_n), np.log(total)
        e_c = log_c - log_compute
        e_i = log_total / gamma - log_step
        rms_c, rms_i = math.sqrt(float(e_c @ e_c) / count), math.sqrt(float(e_i @ e_i) / count)
        w_c = e_c / (count * max(rms_c, 1e-12))  # d rms / d e
        w_i = e_i / (count * max(rms_i, 1e-12))
        dlogiter_dtc, dlogiter_dtn = pow_c / (t_c * total), pow_n / (t_n * total)
        ratio_n, ratio_r = (b_n / a_n) ** 2, (b_r / a_r) ** 2
        partial = (  # d loss / d log(parameter), through t_c (alpha_c, beta_c), t_n (the next four), gamma
            lambda: float(w_c @ (a_c / t_c)) + float(w_i @ (dlogiter_dtc * a_c)),
            lambda: float(w_c @ (slope_c / t_c)) + float(w_i @ (dlogiter_dtc * slope_c)),
            lambda: float(w_i @ (dlogiter_dtn * (multi * a_n))) - 2e-2 * ratio_n,
            lambda: float(w_i @ (dlogiter_dtn * (multi * b_n * extra))) + 2e-2 * ratio_n,
            lambda: float(w_i @ (dlogiter_dtn * (local * a_r))) - 2e-2 * ratio_r,
            lambda: float(w_i @ (dlogiter_dtn * (local * b_r * extra))) + 2e-2 * ratio_r,
            lambda: float(w_i @ (-log_total / gamma**2 + (pow_c * log_c + pow_n * log_n) / (gamma * total)))
            + 2e-3 * (gamma - 1),
        )
        grad = np.array([partial[i]() for i in free])  # pinned parameters' partials are not needed
        value = rms_c + rms_i + 1e-3 * (gamma - 1) ** 2 + 1e-2 * (ratio_n + ratio_r)
        return value, grad

    log_lo, log_hi = np.log(floor_s), np.log(1e3)
    bounds = [(log_lo, log_hi) if i < 6 else (1.0, 10.0) for i in free]
    first_start = np.array([np.log(1e-1), np.log(1e-2)] * 3 + [1.0 + 1e-3])[free]
    if start is not None:
        z = np.array([np.log(max(v, _TINY)) for v in astuple(start)[:6]] + [start.gamma])[free]
        first_start = np.clip(z, [b[0] for b in bounds], [b[1] for b in bounds])
    starts = [first_start] + [
        np.array([rng.uniform(-9.0, 0.0) if i < 6 else rng.uniform(1.0, 3.0) for i in free])
        for _ in range(restarts)
    ]
    from schedlab.models.lbfgsb import minimize_bounded  # scipy's L-BFGS-B, loaded with the first fit

    _, best = min((minimize_bounded(loss_and_grad, z0, bounds) for z0 in starts), key=lambda fx: fx[0])
    params = ThroughputParams(*(float(v) for v in unpack(best)))  # floats, not numpy's: JSON-plain
    if not np.any(n > 1):  # Pollux's prior: the network is no faster than the node's bus
        params = ThroughputParams(
            params.alpha_c, params.beta_c,
            max(params.alpha_n, params.alpha_r * 1.1), max(params.beta_n, params.beta_r * 1.1),
            params.alpha_r, params.beta_r, params.gamma,
        )
    return params


def params_to_list(params: ThroughputParams) -> list[float]:
    """The 7 parameters in field order, as Python floats (profiles.json's "params")."""
    return [float(v) for v in astuple(params)]


def canonical_placement(gpus_per_node: Iterable[int]) -> tuple[int, ...]:
    """Drop empty nodes and rotate to the lexicographically smallest form (Pollux's key).

    GPUs per node, e.g. (0, 2, 4, 0, 1) -> (1, 2, 4): the key of the measured placements.
    """
    p = tuple(int(g) for g in gpus_per_node if g)
    return min(p[i:] + p[:i] for i in range(len(p))) if p else ()


class MeasuredTable:
    """Measured step and sync times of one model (placements.csv + scalability.csv).

    A measured placement is interpolated linearly over the local batch; any other placement
    linearly over (nodes, replicas, local batch) from both tables, as the Pollux simulator does.
    """

    def __init__(self, placements: pd.DataFrame, scalability: pd.DataFrame):
        self.placements = placements.assign(
            num_nodes=placements.placement.astype(str).str.len(),
            num_replicas=placements.placement.astype(str).map(lambda s: sum(map(int, s))),
        )
        self.scalability = scalability

    @classmethod
    def from_dir(cls, path: str | Path) -> "MeasuredTable":
        """The tables of one application's folder (its placements.csv and scalability.csv)."""
        import pandas as pd

        return cls(pd.read_csv(f"{path}/placements.csv"), pd.read_csv(f"{path}/scalability.csv"))

    def points(self) -> pd.DataFrame:
        """Every measured point as (num_nodes, num_replicas, local_bsz, step_time, sync_time)."""
        import pandas as pd

        cols = ["num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time"]
        return pd.concat([self.placements[cols], self.scalability[cols]], ignore_index=True)

    @cached_property
    def _by_placement(self) -> dict[tuple[int, ...], interp1d]:
        from scipy.interpolate import interp1d

        out = {}
        for key, df in self.placements.groupby("placement"):
            df = df.sort_values("local_bsz")
            placement = tuple(int(c) for c in str(key))
            out[placement] = interp1d(
                df.local_bsz.to_numpy(float), df[["step_time", "sync_time"]].to_numpy(float),
                axis=0, bounds_error=False, fill_value="extrapolate",
            )
        return out

    @cached_property
    def _scattered(self) -> LinearNDInterpolator:
        import pandas as pd
        from scipy.interpolate import LinearNDInterpolator

        xs, ys = ["num_nodes", "num_replicas", "local_bsz"], ["step_time", "sync_time"]
        grouped = self.placements.groupby(xs, as_index=False)[ys].mean()
        df = pd.concat([grouped, self.scalability[xs + ys]], ignore_index=True)
        return LinearNDInterpolator(df[xs].to_numpy(float), df[ys].to_numpy(float))

    def step_sync_s(self, gpus_per_node: Iterable[int], local_bsz: float) -> tuple[float, float]:
        """Measured (step time, sync time) of one optimizer step without accumulation, in seconds.

        `gpus_per_node` lists the job's GPUs on each node it uses. Raises ValueError where no
        measurement covers the point (outside the tables' convex hull).
        """
        placement = canonical_placement(gpus_per_node)
        if placement in self._by_placement:
            step, sync = self._by_placement[placement](local_bsz)
        else:
            nodes = min(len(placement), 16)  # the tables stop at 16 nodes
            step, sync = self._scattered([nodes, sum(placement), local_bsz])[0]
        if not np.isfinite(step):
            raise ValueError(
                f"no measurement covers placement {placement} at local batch {local_bsz}"
            )
        return float(step), float(sync)
