"""Statistical efficiency from the gradient noise scale, goodput, and the best batch size.

Pollux (Qiao et al., OSDI'21, section 3.1): with total batch M, initial batch M0, scale
s = M / M0 and gradient statistics measured at M0, sqr = |E g|^2 and var = tr(Sigma) / M0 (the
variance of a gradient estimated from one batch of M0 examples),

    gain(M)       = (var + sqr) / (var / s + sqr)       progress per step, in M0-steps
    efficiency(M) = gain(M) / s                          (= (phi + M0) / (phi + M), phi = M0 var/sqr)
    goodput       = throughput(M) * efficiency(M)        M0-equivalent examples per second

phi = tr(Sigma) / |E g|^2 is the gradient noise scale (McCandlish et al., "An Empirical Model of
Large-Batch Training", 2018), in examples.

The best batch for a shape (nodes, replicas) searches 50 total batch sizes on a geometric grid
in [max(M0, min_local * r), max_bsz], splitting a local batch above max_local into gradient
accumulation steps, exactly as Pollux's GoodputFunction.optimize does.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

import numpy as np

from schedlab.models.envelope import NO_ENVELOPES
from schedlab.models.throughput import throughput
from schedlab.state import BatchLimits, GradStats, JobSpec, ThroughputParams

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

__all__ = ["BATCH_GRID_POINTS", "BatchChoice", "BatchGrid", "batch_grid", "best_batch", "best_batch_shared",
           "best_on_grid", "efficiency", "gain", "goodput", "grid_goodput", "grid_totals", "runnable_throughput",
           "split_fixed_batch", "split_local_batch", "submitted_fits", "submitted_split"]

BATCH_GRID_POINTS = 50
_EPS = 1e-8  # tolerance of Pollux's floor/ceil on batch sizes


def gain(grad: GradStats, init_bsz: float | np.ndarray, total_bsz: ArrayLike) -> np.ndarray:
    """Pollux's gain: the progress of one optimizer step at total batch M, in steps at M0.

    With s = M / M0 one step at M makes as much progress as

        gain(M) = (var + sqr) / (var / s + sqr)

    steps at M0 (Pollux, OSDI'21, eq. 1, after McCandlish et al., 2018): 1 at s = 1, growing
    with s towards the ceiling 1 + var / sqr, where a larger batch has averaged away the noise
    and only the signal is left. A job without gradient statistics (var = sqr = 0) gains 1.

    Parameters
    ----------
    grad : GradStats
        sqr = |E g|^2 and var = tr(Sigma) / M0, measured at the initial batch: floats, or arrays
        aligned with `total_bsz`.
    init_bsz : float or ndarray
        M0, the initial (reference) total batch, in examples.
    total_bsz : array_like
        M, the total batch of one optimizer step, r x micro-batch x (accum_steps + 1), in examples.

    Returns
    -------
    ndarray
        M0-steps per step (dimensionless), shaped as `total_bsz`.

    Examples
    --------
    A job whose gradient noise at M0 is three times its signal (var = 3 sqr) gains at most 4x:

    >>> from schedlab.state import GradStats
    >>> grad = GradStats(sqr=1.0, var=3.0)
    >>> [round(float(g), 3) for g in gain(grad, 100, [100, 200, 400, 1600])]
    [1.0, 1.6, 2.286, 3.368]
    """
    return efficiency(grad, init_bsz, total_bsz) * (np.asarray(total_bsz, dtype=float) / init_bsz)  # efficiency x s


def efficiency(grad: GradStats, init_bsz: float | np.ndarray, total_bsz: ArrayLike) -> np.ndarray:
    """Pollux's statistical efficiency: the progress one example makes at total batch M, relative to M0.

        efficiency(M) = gain(M) / s = (phi + M0) / (phi + M),   s = M / M0,   phi = M0 var / sqr

    phi is the gradient noise scale in examples (McCandlish et al., 2018: tr(Sigma) / |E g|^2).
    Well below phi a larger batch uses its examples nearly as well as M0 does (efficiency ~1);
    well above it most of each batch is wasted (efficiency ~ (phi + M0) / M). Pollux (OSDI'21,
    section 3.1) multiplies it with the throughput: `goodput`.

    Parameters
    ----------
    grad : GradStats
        sqr = |E g|^2 and var = tr(Sigma) / M0, measured at the initial batch: floats, or arrays
        aligned with `total_bsz`.
    init_bsz : float or ndarray
        M0, the initial (reference) total batch, in examples.
    total_bsz : array_like
        M, the total batch of one optimizer step, in examples.

    Returns
    -------
    ndarray
        M0-equivalent examples per example processed: 1 at M = M0, below 1 above it.

    Examples
    --------
    With var = 3 sqr and M0 = 100 the noise scale is phi = 300 examples:

    >>> from schedlab.state import GradStats
    >>> grad = GradStats(sqr=1.0, var=3.0)
    >>> [round(float(e), 3) for e in efficiency(grad, 100, [100, 200, 400, 1600])]
    [1.0, 0.8, 0.571, 0.211]
    >>> round((300 + 100) / (300 + 400), 3)  # the closed form at M = 400
    0.571
    """
    # gain / s in closed form, (var + sqr) M0 / (var M0 + sqr M), the one formula of both (gain
    # is efficiency x s): one division per grid point of every option of a round. Without
    # statistics (var = sqr = 0) gain is 1, so efficiency is M0 / M: the form with sqr read as 1.
    # The quotient is divided in its denominator's buffer (which has the full shape): a round's
    # grids are valued in blocks, and each temporary of a block is a fresh page's worth of memory.
    init = np.asarray(init_bsz, dtype=float)
    signal = _signal(grad)
    denominator = grad.var * init + signal * np.asarray(total_bsz, dtype=float)
    numerator = (grad.var + signal) * init
    return np.divide(numerator, denominator, out=denominator) if type(denominator) is np.ndarray else numerator / denominator


def _signal(grad: GradStats) -> np.ndarray:
    """sqr as efficiency reads it: 1 for a job without statistics (var = sqr = 0)."""
    return np.where(grad.var + grad.sqr > 0, grad.sqr, 1.0)


def noise_scale(grad: GradStats, init_bsz: float | np.ndarray) -> np.ndarray:
    """phi = M0 var / sqr, the gradient noise scale in examples, as `efficiency` reads it:
    efficiency(M) = (phi + M0) / (phi + M). 0 for a job without statistics (efficiency M0 / M),
    inf where sqr = 0 < var (efficiency 1 at every batch)."""
    with np.errstate(divide="ignore"):
        return np.asarray(grad.var, dtype=float) * init_bsz / _signal(grad)


def goodput(params: ThroughputParams, grad: GradStats, init_bsz: float | np.ndarray, num_nodes: ArrayLike,
            num_replicas: ArrayLike, local_bsz: ArrayLike, accum_steps: ArrayLike = 0) -> np.ndarray:
    """Pollux's goodput: training progress per second, in M0-equivalent examples per second.

        goodput = throughput(n, r, m, s) * efficiency(r * m * (s + 1))

    The throughput is Pollux's step-time model's (models.throughput.throughput): examples per
    second on r GPUs over n nodes at micro-batch m with s extra accumulation steps. A goodput
    scheduler compares configurations by goodput, not throughput: more GPUs at a larger batch
    process more examples per second, but each is worth less once the batch passes the noise
    scale (Pollux, OSDI'21, section 3.1).

    Parameters
    ----------
    params : ThroughputParams
        The job's step-time model on the GPUs' type (floats, or arrays aligned with the shapes).
    grad : GradStats
        Gradient statistics at the initial batch (see `gain`).
    init_bsz : float or ndarray
        M0, the initial total batch, in examples.
    num_nodes, num_replicas : array_like
        Nodes spanned and GPUs (data-parallel replicas).
    local_bsz : array_like
        Micro-batch per GPU, in examples.
    accum_steps : array_like, default 0
        Extra gradient-accumulation micro-steps per optimizer step.

    Returns
    -------
    ndarray
        M0-equivalent examples per second.

    Examples
    --------
    cifar10 (ResNet-18; the Pollux artifact's profile on T4 GPUs, noise scale ~72 examples at
    M0 = 128): four GPUs at a micro-batch of 128 process 3.8x the examples of one, but at a
    total batch of 512 each is worth a third as much:

    >>> from schedlab.models.profiles import shipped_profiles
    >>> from schedlab.models.throughput import throughput
    >>> p = shipped_profiles()["cifar10"]
    >>> one = goodput(p.params, p.grad_stats, p.batch.init_bsz, 1, 1, 128)
    >>> four = goodput(p.params, p.grad_stats, p.batch.init_bsz, 1, 4, 128)
    >>> rate, eff = throughput(p.params, 1, 4, 128), efficiency(p.grad_stats, p.batch.init_bsz, 4 * 128)
    >>> print(f"{float(one):.0f}; {float(rate):.0f} examples/s x {float(eff):.3f} = {float(four):.0f}")
    1195; 4573 examples/s x 0.343 = 1569
    """
    total = np.asarray(num_replicas) * np.asarray(local_bsz) * (np.asarray(accum_steps) + 1)
    return throughput(params, num_nodes, num_replicas, local_bsz, accum_steps) * efficiency(
        grad, init_bsz, total
    )


@dataclass(frozen=True)
class BatchChoice:
    """The best batch of each shape, as arrays aligned with the shapes asked for.

    Attributes
    ----------
    goodput : ndarray
        Goodput at that batch, M0-equivalent examples per second; 0 where the shape has no
        batch the job can run.
    local_bsz : ndarray
        Micro-batch per GPU, in examples.
    accum_steps : ndarray
        Extra gradient-accumulation steps: the total batch is r x local_bsz x (accum_steps + 1).
    """

    goodput: np.ndarray
    local_bsz: np.ndarray
    accum_steps: np.ndarray


def split_local_batch(local_bsz: ArrayLike, num_replicas: int | np.ndarray, init_bsz: float | np.ndarray,
                      max_local_bsz: float | np.ndarray):
    """Split a per-GPU batch into (micro-batch, accumulation steps) within max_local_bsz.

    A local batch above max_local_bsz runs as ceil(local / max_local) equal micro-steps, the
    micro-batch rounded up (so the total may grow by a few examples). A job on one GPU with a
    batch above M0 accumulates at least once: it can then estimate its gradient noise across
    micro-batches, as Pollux's agent does.

    Parameters
    ----------
    local_bsz : array_like
        Examples per GPU per optimizer step.
    num_replicas : int or ndarray
        GPUs (data-parallel replicas).
    init_bsz : float or ndarray
        M0, the job's initial total batch.
    max_local_bsz : float or ndarray
        The largest micro-batch one GPU holds.

    Returns
    -------
    micro : ndarray of int
        Micro-batch per GPU.
    accum : ndarray of int
        Extra accumulation steps (0: one micro-step per optimizer step).
    """
    local_bsz = np.asarray(local_bsz, dtype=float)
    accum = np.maximum(np.ceil(local_bsz / max_local_bsz - _EPS) - 1, 0)  # >= 0 when max_local_bsz dwarfs the batch
    # One replica estimates gradient noise only across micro-batches: Pollux forces one.
    accum = np.where((num_replicas == 1) & (local_bsz > init_bsz + _EPS), np.maximum(accum, 1), accum)
    accum = accum.astype(int)
    micro = np.ceil(local_bsz / (accum + 1) - _EPS).astype(int)
    return micro, accum


def split_fixed_batch(total_bsz: int, num_replicas: int, limits: BatchLimits) -> tuple[int, int]:
    """(micro-batch, accumulation steps) of a user-fixed total batch on `num_replicas` GPUs.

    As the Pollux artifact's jobs run it: ceil(total / r) per GPU, split by `split_local_batch`,
    then the micro-batch lowered so that the total never exceeds the largest batch the job
    supports (limits.max_bsz), and at least 1.
    """
    micro, accum = split_local_batch(np.ceil(total_bsz / num_replicas - _EPS), num_replicas, limits.init_bsz,
                                     limits.max_local_bsz)
    micro, accum = int(micro), int(accum)
    micro = min(micro, int(limits.max_bsz / (num_replicas * (accum + 1))))
    return max(micro, 1), accum


def submitted_split(job: JobSpec, num_gpus: int, gpu_type: str | None = None) -> tuple[int, int]:
    """(micro-batch, accumulation steps) of a job at its submitted batch on `num_gpus` GPUs.

    The submitted batch is JobSpec.submitted_bsz; policies that do not adapt the batch (the
    baselines, PAL's placement) run jobs this way (`split_fixed_batch`), within the job's batch
    limits on `gpu_type` (JobSpec.batch_on; None: its own, JobSpec.batch).
    """
    return split_fixed_batch(job.submitted_bsz, num_gpus, job.batch if gpu_type is None else job.batch_on(gpu_type))


def submitted_fits(job: JobSpec, num_gpus: int, gpu_type: str | None = None) -> bool:
    """Whether the job's submitted batch splits over `num_gpus` GPUs (of `gpu_type`) within its
    per-GPU limits there (submitted_split's micro-batch, against JobSpec.batch_on)."""
    micro, _ = submitted_split(job, num_gpus, gpu_type)
    limits = job.batch if gpu_type is None else job.batch_on(gpu_type)
    return limits.min_local_bsz <= micro <= limits.max_local_bsz


# Shapes valued per block: a block's (grid x shapes) temporaries stay in cache. One call over all
# 300,000 shapes of a freezing round made ~40 temporaries of 120 MB each and took 2.9 s; in
# blocks of 4,096 shapes it takes 0.57 s, with bit-identical answers.
_BLOCK_SHAPES = 4096
# Rows valued per block on their shapes' grids (best_batch_shared). A block's temporaries, 256
# rows x 50 points, stay under glibc's 128 KiB mmap threshold, so they reuse freed heap memory
# instead of faulting in fresh pages: a round of 100 jobs (1,000 rows) valued its options in
# 2.0 ms so, 2.9 ms in one block of 1,024 rows; 110,000 rows took 150 ms in blocks of 4,096.
_BLOCK_ROWS = 256


def best_batch(params: ThroughputParams, grad: GradStats, limits: BatchLimits, num_nodes: ArrayLike,
               num_replicas: ArrayLike, fixed_bsz: ArrayLike = 0) -> BatchChoice:
    """The best goodput over total batch sizes of each (nodes, replicas) shape.

    Pollux's batch search (GoodputFunction.optimize): `BATCH_GRID_POINTS` total batches on a
    geometric grid from max(M0, min_local_bsz x r) to max_bsz, each split per GPU
    (`split_local_batch`); the valid point of highest goodput wins.

    Parameters
    ----------
    params, grad, limits : ThroughputParams, GradStats, BatchLimits
        The job's step-time model, gradient statistics and batch limits. Every field may be a
        scalar or an array aligned with the shapes, so that all jobs' shapes of a round are
        valued in one vectorized call.
    num_nodes, num_replicas : array_like of int
        The shapes: nodes spanned and GPUs.
    fixed_bsz : array_like, default 0
        A total batch > 0 is the only one valued (a job whose batch the user fixed).

    Returns
    -------
    BatchChoice
        Goodput, micro-batch and accumulation steps per shape.

    Examples
    --------
    cifar10 on one GPU, four GPUs of a node, and eight over two nodes: four GPUs do best at a
    total batch of 140 (35 per GPU), not at 128 per GPU; eight, across the network, do no better
    than one:

    >>> from schedlab.models.profiles import shipped_profiles
    >>> p = shipped_profiles()["cifar10"]
    >>> choice = best_batch(p.params, p.grad_stats, p.batch, num_nodes=[1, 1, 2], num_replicas=[1, 4, 8])
    >>> choice.local_bsz.tolist(), [round(float(g)) for g in choice.goodput]
    ([128, 35, 67], [1195, 2458, 1169])
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


def best_batch_shared(params: ThroughputParams, limits: BatchLimits, num_nodes: np.ndarray, num_replicas: np.ndarray,
                      fixed_bsz: np.ndarray, grad: GradStats, shape: np.ndarray,
                      keys: Sequence[Hashable] | None = None) -> BatchChoice:
    """`best_batch` of rows that share their shapes: each shape's grid and its throughput once.

    A shape u is a model and a size: params, limits, num_nodes, num_replicas and fixed_bsz are
    arrays indexed by u. Row i is shape `shape[i]` at its own gradient statistics (`grad`, arrays
    indexed by row), the only input of best_batch that differs between the jobs of one
    application. The answers are best_batch's over the rows, element for element; the grid and
    its throughput, most of best_batch's work, are computed once per shape instead of once per
    row (a round of 1,000 jobs of six applications: ~15,000 rows, a few hundred shapes).

    Parameters
    ----------
    params, limits : ThroughputParams, BatchLimits
        Each shape's step-time model and batch limits (fields: arrays indexed by shape).
    num_nodes, num_replicas, fixed_bsz : ndarray
        Each shape's nodes, GPUs and fixed total batch (0: the best batch is searched).
    grad : GradStats
        Each row's gradient statistics (fields: arrays indexed by row).
    shape : ndarray of int
        Each row's shape.
    keys : list of hashable, optional
        One per shape, equal only where the shapes' numbers (params, limits, nodes, replicas,
        fixed batch) are: what the shapes' grids are memoized by (`_memoized_tables`). Without
        them, the numbers themselves.

    Returns
    -------
    BatchChoice
        Goodput, micro-batch and accumulation steps per row.

    Examples
    --------
    Two cifar10 jobs, the second with four times the gradient noise, on one GPU and on four of a
    node: two shapes valued once, four rows, best_batch's answers:

    >>> import numpy as np
    >>> from schedlab.models.profiles import shipped_profiles
    >>> from schedlab.state import GradStats
    >>> p = shipped_profiles()["cifar10"]
    >>> g = p.grad_stats
    >>> on_shapes = lambda obj: type(obj)(*(np.full(2, v) for v in vars(obj).values()))
    >>> rows = GradStats(np.array([g.sqr, g.sqr, g.sqr / 4, g.sqr / 4]), np.full(4, g.var))
    >>> choice = best_batch_shared(on_shapes(p.params), on_shapes(p.batch), np.array([1, 1]), np.array([1, 4]),
    ...                            np.zeros(2), rows, shape=np.array([0, 1, 0, 1]))
    >>> choice.local_bsz.tolist()
    [128, 35, 128, 61]
    >>> [best_batch(p.params, grad, p.batch, [1, 1], [1, 4]).local_bsz.tolist() for grad in (g, GradStats(g.sqr / 4, g.var))]
    [[128, 35], [128, 61]]
    """
    goodput, local, accum = np.zeros(len(shape)), np.zeros(len(shape), dtype=int), np.zeros(len(shape), dtype=int)
    grad_by_row = np.stack([np.asarray(grad.sqr, dtype=float), np.asarray(grad.var, dtype=float)])
    init_bsz = np.asarray(limits.init_bsz, dtype=float)
    memoized = len(num_replicas) <= GRID_MEMO_SHAPES
    order: np.ndarray | None = None  # the rows by shape, where the shapes take several blocks
    starts = [0, len(shape)]  # each block's first row (in `order`)
    if len(num_replicas) > _BLOCK_SHAPES:
        order = np.argsort(shape, kind="stable")
        starts = np.searchsorted(shape[order], np.arange(0, len(num_replicas) + _BLOCK_SHAPES, _BLOCK_SHAPES)).tolist()
    for b, first in enumerate(range(0, len(num_replicas), _BLOCK_SHAPES)):
        shapes = slice(first, first + _BLOCK_SHAPES)
        block: tuple[ThroughputParams, BatchLimits, np.ndarray, np.ndarray, np.ndarray] = (
            (params, limits, num_nodes, num_replicas, fixed_bsz) if order is None  # one block: every shape
            else (_cut(params, shapes), _cut(limits, shapes), num_nodes[shapes], num_replicas[shapes], fixed_bsz[shapes]))
        tables, at, memo = (_memoized_tables(*block, keys=keys[shapes] if keys is not None else None) if memoized
                            else (_grid_tables(*block), None, None))
        rows = np.arange(starts[b], starts[b + 1]) if order is None else order[starts[b]:starts[b + 1]]
        u = shape[rows] - first
        table, init = (u if at is None else at[u]), init_bsz[shapes][u]
        on_grid = np.arange(len(rows))  # the rows (of `rows`) valued on their whole grid
        # a row values its envelope's few candidates; a wide segment's, or a table's yet without one, its grid
        if memo is not None:
            ready = memo.ready[table]
            if ready.any():
                envelopes = memo.envelopes  # read after `ready`: every ready table is in it
                on: slice | np.ndarray = slice(None) if ready.all() else np.flatnonzero(ready)
                points, wide = envelopes.candidates(table[on], noise_scale(GradStats(*grad_by_row[:, rows[on]]), init[on]))
                few, wide_rows = (on, on_grid[:0]) if not wide.any() else (on_grid[on][~wide], on_grid[on][wide])
                goodput[rows[few]], local[rows[few]], accum[rows[few]] = _best_points(
                    tables, table[few], points[~wide] if len(wide_rows) else points, grad_by_row[:, rows[few]], init[few])
                grid = ~ready
                grid[wide_rows] = True
                on_grid = np.flatnonzero(grid)
            if len(on_grid):
                memo.served_on_grid(table[on_grid])
        for lo in range(0, len(on_grid), _BLOCK_ROWS):
            some = on_grid[lo:lo + _BLOCK_ROWS]
            goodput[rows[some]], local[rows[some]], accum[rows[some]] = _best_points(
                tables, table[some], None, grad_by_row[:, rows[some]], init[some])
    return BatchChoice(goodput, local, accum)


def _best_points(tables: np.ndarray, table: np.ndarray, points: np.ndarray | None, grad_by_row: np.ndarray,
                 init_bsz: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each row's best of `points` (rows x k, in grid order; None: every point) of its grid
    table (`_grid_tables`): its goodput, micro-batch and accumulation steps; the first of equal
    maxima wins, as on the whole grid."""
    # each point by its place in the flat tables (a table: its 4 x points numbers), read with take
    # (a 100-job round's 1,100 rows: 58 us, where indexing the tables in two dimensions took 92)
    P, flat = BATCH_GRID_POINTS, tables.reshape(-1)
    at = table[:, None] * (4 * P) + (np.arange(P) if points is None else points)
    good = grid_goodput(flat.take(at), flat.take(at + P), GradStats(*grad_by_row[:, :, None]), init_bsz[:, None])
    best = np.argmax(good, axis=1)
    each = np.arange(len(best))
    chosen = at[each, best]
    return good[each, best], flat.take(chosen + 2 * P), flat.take(chosen + 3 * P)


def _grid_tables(params: ThroughputParams, limits: BatchLimits, num_nodes: np.ndarray, r: np.ndarray,
                 fixed: np.ndarray) -> np.ndarray:
    """Each shape's grid as a table (shapes, 4, points): the runnable throughput of every point,
    its total batch, micro-batch and accumulation steps (exact in floats)."""
    grid = batch_grid(limits, r, fixed)
    runnable = runnable_throughput(grid, throughput(params, num_nodes, r, grid.micro, grid.accum))
    return np.ascontiguousarray(np.stack([runnable, grid_totals(grid, r), grid.micro, grid.accum]).transpose(2, 0, 1),
                                dtype=float)


# A shape's grid table (`_grid_tables`) depends on its model and size alone, and a scheduler meets
# the same ones round after round: the jobs of a few applications on a few sizes (two days of the
# Philly trace: 66 models in 2,848 rounds). So tables are memoized across calls by the shape's
# exact numbers (or keys that stand for them), up to GRID_MEMO_SHAPES of them (1.6 KB each; the
# memo starts over when full); a call with more shapes than that computes its own.
GRID_MEMO_SHAPES = 1 << 14


class _GridMemo:
    """Grid tables by key, in the rows of one array: a call reads its shapes' tables by their row
    numbers, without stacking them (a stack of a round's tables was 2 % of a small round).

    Rounds solved in threads at once (the service) share it. Tables are added under a lock, and an
    array that grows is copied whole before the new rows' keys are published, so every row a
    reader found is in the array it reads next; a memo that starts over is a new object. A
    table's envelope (models.envelope) comes once it has valued ENVELOPE_AFTER_ROWS rows on its
    grid: the memo's Envelopes are replaced whole, then the table is marked ready, and a reader
    reads `ready` before `envelopes`."""

    def __init__(self) -> None:
        self.row: dict[Hashable, int] = {}
        self.tables = np.empty((0, 4, BATCH_GRID_POINTS))
        self.envelopes = NO_ENVELOPES  # by row: a table's, once it has served enough rows (served_on_grid)
        self.ready = np.zeros(0, dtype=bool)  # the rows among `envelopes`, set after it is replaced
        self.served = np.zeros(0, dtype=np.int64)  # rows each table has valued on its grid
        self.used = 0  # rows written (a key given twice has two)

    def __len__(self) -> int:
        return self.used

    def add(self, keys: list[Hashable], tables: np.ndarray) -> np.ndarray:
        """Remember `tables` under `keys` (the caller holds _GRID_LOCK); their row numbers."""
        first, self.used = self.used, self.used + len(keys)
        if self.used > len(self.tables):
            grown = np.empty((max(2 * len(self.tables), self.used, 64), 4, BATCH_GRID_POINTS))
            grown[:first] = self.tables[:first]
            self.tables = grown
        self.tables[first:self.used] = tables
        if self.used > len(self.served):
            more = len(self.tables) - len(self.served)
            self.ready = np.concatenate([self.ready, np.zeros(more, dtype=bool)])
            self.served = np.concatenate([self.served, np.zeros(more, dtype=np.int64)])
        rows = np.arange(first, self.used)
        self.row.update(zip(keys, rows.tolist()))
        return rows

    def served_on_grid(self, table: np.ndarray) -> None:
        """Count the rows just valued on these tables' grids; a table past ENVELOPE_AFTER_ROWS of
        them gets its envelope (models.envelope). Counts lost to a race only delay one."""
        seen, rows = np.unique(table, return_counts=True)
        served = self.served
        served[seen] += rows
        due = seen[(served[seen] >= ENVELOPE_AFTER_ROWS) & ~self.ready[seen]]
        if len(due):
            with _GRID_LOCK:
                due = due[~self.ready[due]]
                self.envelopes = self.envelopes.with_tables(due, self.tables[due, 0], self.tables[due, 1])
                self.ready[due] = True  # after: a reader that finds a row ready finds its envelope


# Rows a table values on its grid before it gets its envelope. An envelope costs about what 600
# rows save; the 60 tables of random 100-job rounds serve ~18 rows a round each, round after
# round, while PAL's measured variability (each job's speed scaled by its GPUs) makes thousands of
# tables of a few rows: at 32, workload-1 under pollux in that world made 341 envelopes of 6,851
# tables (50 ms), at 128, 192, at 0 (every table) 0.44 s, 4 % of the replay.
ENVELOPE_AFTER_ROWS = 32

_GRID_MEMO = _GridMemo()
_GRID_LOCK = threading.Lock()


def _memoized_tables(params: ThroughputParams, limits: BatchLimits, num_nodes: np.ndarray, r: np.ndarray,
                     fixed: np.ndarray, keys: Sequence[Hashable] | None = None) -> tuple[np.ndarray, np.ndarray, _GridMemo]:
    """`_grid_tables` as (tables, rows, memo): shape i's table is tables[rows[i]], from the memo
    where it is there, the others computed at once (its envelopes are the memo's, by row); the
    memo's keys are `keys` where given, else the shapes' numbers."""
    global _GRID_MEMO
    if keys is None:
        numbers = np.column_stack([*(np.asarray(getattr(obj, f.name), dtype=float) for obj in (params, limits)
                                     for f in fields(obj)), num_nodes, r, fixed])
        keys = list(map(tuple, numbers.tolist()))
    memo = _GRID_MEMO
    rows = np.array([memo.row.get(key, -1) for key in keys], dtype=np.intp)
    missing = np.flatnonzero(rows < 0)
    if not len(missing):
        return memo.tables, rows, memo
    computed = _grid_tables(_cut(params, missing), _cut(limits, missing), num_nodes[missing], r[missing],
                            fixed[missing])
    with _GRID_LOCK:
        if len(memo) + len(missing) > GRID_MEMO_SHAPES:  # start over, with this call's tables
            tables = np.empty((len(keys), 4, BATCH_GRID_POINTS))
            found = rows >= 0
            tables[found], tables[missing] = memo.tables[rows[found]], computed
            memo = _GRID_MEMO = _GridMemo()
            rows = memo.add(list(keys), tables)
        else:
            rows[missing] = memo.add([keys[i] for i in missing.tolist()], computed)
        return memo.tables, rows, memo  # read after the rows are added: the array they are in


def _cut(obj, which: slice | np.ndarray):
    """The dataclass with each of its array fields cut to `which`."""
    return type(obj)(*(np.asarray(getattr(obj, f.name))[which] for f in fields(obj)))


def _best_batch_block(params: ThroughputParams, grad: GradStats, limits: BatchLimits, n: np.ndarray, r: np.ndarray,
                      fixed: np.ndarray) -> BatchChoice:
    """best_batch on one block of shapes."""
    grid = batch_grid(limits, r, fixed)
    return best_on_grid(grid, throughput(params, n, r, grid.micro, grid.accum), grad, limits.init_bsz, r)


@dataclass(frozen=True)
class BatchGrid:
    """Each shape's candidate batches: micro-batch, accumulation steps, and whether the job can run it.

    Arrays of shape (BATCH_GRID_POINTS, shapes). Throughput on the grid depends on the job's
    model and the grid's gradient efficiency on its gradient statistics, so a caller that meets
    the same model with new statistics (a replayed job, every epoch) values the grid once
    (`best_on_grid`).
    """

    micro: np.ndarray
    accum: np.ndarray
    valid: np.ndarray


def batch_grid(limits: BatchLimits, r: np.ndarray, fixed: np.ndarray) -> BatchGrid:
    """The geometric grid of total batches of each shape (`r` replicas), split per GPU.

    From max(M0, min_local_bsz x r) to max(that, max_bsz), or the fixed batch alone where
    `fixed` > 0. A point is valid when its micro-batch lies in [min_local_bsz, max_local_bsz]
    and its total (after rounding the micro-batch up) stays within max(max_bsz, fixed).
    """
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
    """The best goodput of each shape over its grid, from the throughput of every grid point.

    `grid_throughput` (examples per second, shaped as the grid) times the efficiency of each
    point's total batch; invalid points count 0, and the first of equal maxima wins.
    """
    good = grid_goodput(runnable_throughput(grid, grid_throughput), grid_totals(grid, r), grad, init_bsz)
    best = np.argmax(good, axis=0)
    cols = np.arange(len(r))
    return BatchChoice(good[best, cols], grid.micro[best, cols], grid.accum[best, cols])


def grid_totals(grid: BatchGrid, r) -> np.ndarray:
    """The total batch of every grid point: r x micro-batch x (accumulation steps + 1)."""
    return np.asarray(r) * np.asarray(grid.micro) * (np.asarray(grid.accum) + 1)


def runnable_throughput(grid: BatchGrid, grid_throughput: np.ndarray) -> np.ndarray:
    """The throughput of every grid point, 0 where the job cannot run it (grid.valid)."""
    return np.where(grid.valid, grid_throughput, 0.0)


def grid_goodput(runnable: np.ndarray, total: np.ndarray, grad: GradStats, init_bsz) -> np.ndarray:
    """Goodput at every grid point: its throughput, 0 where the job cannot run it
    (`runnable_throughput`), times the efficiency of its total batch."""
    good = efficiency(grad, np.asarray(init_bsz, float), total)
    return np.multiply(runnable, good, out=good) if good.shape == np.shape(runnable) else runnable * good
