"""Statistical efficiency from the gradient noise scale, goodput, and the best batch size.

Pollux (OSDI'21, section 3.1): with total batch M, initial batch M0, scale s = M / M0 and
gradient statistics sqr = |E g|^2, var = per-example variance at M0,

    gain(M)       = (var + sqr) / (var / s + sqr)       progress per step, in M0-steps
    efficiency(M) = gain(M) / s                          (= (phi + M0) / (phi + M), phi = M0 var/sqr)
    goodput       = throughput(M) * efficiency(M)        M0-equivalent examples per second

The best batch for a shape (nodes, replicas) searches 50 total batch sizes on a geometric grid
in [max(M0, min_local * r), max_bsz], splitting a local batch above max_local into gradient
accumulation steps, exactly as Pollux's GoodputFunction.optimize does.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from schedlab.models.throughput import throughput
from schedlab.state import BatchLimits, GradStats, JobSpec, ThroughputParams

BATCH_GRID_POINTS = 50
_EPS = 1e-8  # tolerance of Pollux's floor/ceil on batch sizes


def gain(grad: GradStats, init_bsz: float | np.ndarray, total_bsz):
    scale = np.asarray(total_bsz, dtype=float) / init_bsz
    denom = grad.var / scale + grad.sqr
    return np.where(denom > 0, (grad.var + grad.sqr) / np.where(denom > 0, denom, 1.0), 1.0)


def efficiency(grad: GradStats, init_bsz: float | np.ndarray, total_bsz):
    return gain(grad, init_bsz, total_bsz) / (np.asarray(total_bsz, dtype=float) / init_bsz)


def goodput(params, grad, init_bsz, num_nodes, num_replicas, local_bsz, accum_steps=0):
    total = np.asarray(num_replicas) * np.asarray(local_bsz) * (np.asarray(accum_steps) + 1)
    return throughput(params, num_nodes, num_replicas, local_bsz, accum_steps) * efficiency(
        grad, init_bsz, total
    )


@dataclass(frozen=True)
class BatchChoice:
    """Best batch per shape, as arrays aligned with the shapes asked for (goodput 0 = none)."""

    goodput: np.ndarray
    local_bsz: np.ndarray
    accum_steps: np.ndarray


def split_local_batch(local_bsz, num_replicas, init_bsz, max_local_bsz):
    """Split a per-GPU batch into (micro-batch, accumulation steps) within max_local_bsz."""
    local_bsz = np.asarray(local_bsz, dtype=float)
    accum = np.maximum(np.ceil(local_bsz / max_local_bsz - _EPS) - 1, 0)  # >= 0 when max_local_bsz dwarfs the batch
    # One replica estimates gradient noise only across micro-batches: Pollux forces one.
    accum = np.where((num_replicas == 1) & (local_bsz > init_bsz + _EPS), np.maximum(accum, 1), accum)
    accum = accum.astype(int)
    micro = np.ceil(local_bsz / (accum + 1) - _EPS).astype(int)
    return micro, accum


def split_fixed_batch(total_bsz: int, num_replicas: int, limits: BatchLimits) -> tuple[int, int]:
    """(micro-batch, accumulation steps) of a user-fixed total batch on r GPUs, as the Pollux
    artifact's jobs run it: the split above, then the micro-batch lowered so that the total
    never exceeds the largest batch the job supports."""
    micro, accum = split_local_batch(np.ceil(total_bsz / num_replicas - _EPS), num_replicas, limits.init_bsz,
                                     limits.max_local_bsz)
    micro, accum = int(micro), int(accum)
    micro = min(micro, int(limits.max_bsz / (num_replicas * (accum + 1))))
    return max(micro, 1), accum


def submitted_split(job: JobSpec, num_gpus: int) -> tuple[int, int]:
    """(micro-batch, accumulation steps) of a job training at its submitted batch
    (JobSpec.submitted_bsz) on `num_gpus` GPUs, as policies that do not adapt the batch run it."""
    return split_fixed_batch(job.submitted_bsz, num_gpus, job.batch)


# Shapes valued per block: a block's (grid x shapes) temporaries stay in cache. One call over all
# 300,000 shapes of a freezing round made ~40 temporaries of 120 MB each and took 2.9 s; in
# blocks of 4,096 shapes it takes 0.57 s, with bit-identical answers.
_BLOCK_SHAPES = 4096


def best_batch(params: ThroughputParams, grad: GradStats, limits: BatchLimits, num_nodes, num_replicas,
               fixed_bsz=0) -> BatchChoice:
    """Best goodput over total batch sizes for each (nodes, replicas) shape.

    Every field of params, grad and limits may be a scalar or an array aligned with the
    shapes, so that all jobs' shapes of a round are valued in one vectorized call.
    `fixed_bsz` > 0 evaluates that total batch only (jobs whose batch the user fixed).
    """
    n = np.atleast_1d(np.asarray(num_nodes, dtype=int))
    r = np.atleast_1d(np.asarray(num_replicas, dtype=int))
    fixed = np.broadcast_to(np.asarray(fixed_bsz, dtype=float), r.shape)
    if len(r) <= _BLOCK_SHAPES:
        return _best_batch_block(params, grad, limits, n, r, fixed)

    def block(obj, rows: slice):
        """The dataclass with its array fields cut to the block's shapes."""
        return type(obj)(*(v if np.ndim(v) == 0 else np.broadcast_to(v, r.shape)[rows]
                           for v in (getattr(obj, f.name) for f in fields(obj))))

    blocks = [_best_batch_block(block(params, rows), block(grad, rows), block(limits, rows), n[rows], r[rows], fixed[rows])
              for rows in (slice(i, i + _BLOCK_SHAPES) for i in range(0, len(r), _BLOCK_SHAPES))]
    return BatchChoice(np.concatenate([b.goodput for b in blocks]), np.concatenate([b.local_bsz for b in blocks]),
                       np.concatenate([b.accum_steps for b in blocks]))


def _best_batch_block(params: ThroughputParams, grad: GradStats, limits: BatchLimits, n: np.ndarray, r: np.ndarray,
                      fixed: np.ndarray) -> BatchChoice:
    grid = batch_grid(limits, r, fixed)
    return best_on_grid(grid, throughput(params, n, r, grid.micro, grid.accum), grad, limits.init_bsz, r)


@dataclass(frozen=True)
class BatchGrid:
    """Each shape's candidate batches, (BATCH_GRID_POINTS, shapes) arrays: micro-batch,
    accumulation steps, and whether the job can run it. Throughput on the grid depends on the
    job's model and the grid's gradient efficiency on its gradient statistics, so a caller that
    meets the same model with new statistics (a replayed job, every epoch) values the grid once."""

    micro: np.ndarray
    accum: np.ndarray
    valid: np.ndarray


def batch_grid(limits: BatchLimits, r: np.ndarray, fixed: np.ndarray) -> BatchGrid:
    """The geometric grid of total batches of each shape (`r` replicas), split per GPU."""
    init_bsz, max_bsz = np.asarray(limits.init_bsz, float), np.asarray(limits.max_bsz, float)
    lo = np.maximum(init_bsz, limits.min_local_bsz * r).astype(float)
    hi = np.maximum(lo, max_bsz)
    lo, hi = np.where(fixed > 0, fixed, lo), np.where(fixed > 0, fixed, hi)
    total = np.geomspace(lo, hi, BATCH_GRID_POINTS)  # shape (points, shapes)
    micro, accum = split_local_batch(total / r, r, init_bsz, limits.max_local_bsz)
    valid = (micro >= limits.min_local_bsz) & (micro <= limits.max_local_bsz)
    valid &= r * micro * (accum + 1) <= np.maximum(max_bsz, fixed) * (1 + _EPS)
    return BatchGrid(micro, accum, valid)


def best_on_grid(grid: BatchGrid, grid_throughput: np.ndarray, grad: GradStats, init_bsz, r: np.ndarray) -> BatchChoice:
    """The best goodput of each shape over its grid, from the throughput of every grid point."""
    total = np.asarray(r) * np.asarray(grid.micro) * (np.asarray(grid.accum) + 1)
    good = np.where(grid.valid, grid_throughput * efficiency(grad, np.asarray(init_bsz, float), total), 0.0)
    best = np.argmax(good, axis=0)
    cols = np.arange(len(r))
    return BatchChoice(good[best, cols], grid.micro[best, cols], grid.accum[best, cols])
