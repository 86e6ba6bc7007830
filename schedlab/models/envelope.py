r"""Which points of a shape's batch grid can be best, by the gradient noise scale of the job.

A shape's grid point k (efficiency.best_batch_shared's tables) runs at throughput $T_k$ (0 where
the job cannot run it) with total batch $M_k$. A job of noise scale $\phi$ (efficiency.noise_scale)
values it at

$$ \mathit{goodput}_k = T_k \, \frac{\phi + M_0}{\phi + M_k}, $$

so its best point is the one of least $f_k(\phi) = a_k \phi + b_k$, with $a_k = 1 / T_k$ and
$b_k = M_k / T_k$ (a point with $T_k = 0$ is never better than one with $T_k > 0$). Over
$\phi \in [0, \infty]$ the least of these lines is their lower envelope: each of its lines is least
on an interval, $[\max_{a_j > a_k} x_{kj}, \min_{a_j < a_k} x_{kj}]$ with $x_{kj}$ where lines k and
j cross, and the intervals tile $[0, \infty]$. A job then values a handful of its grid's points
instead of all of them (`Envelope.candidates`): a round of 100 jobs values ~1,100 rows of 50 points.

**Exact, not approximate.** The grid's answer is the first of its floating-point maxima. On one
segment the envelope is one line $f_i$, and for any point k, $(f_k - f_i) / f_i$ is a ratio of
linear functions of $\phi$, monotone on the segment: a point within a relative `EPS` of the
envelope anywhere on it is within `EPS` at one of its ends. A segment's candidates are the
points within `EPS` of the envelope at either end (in the limit, at $\phi = \infty$: slopes within
`EPS`), in grid order; every other point is more than `EPS` below the best, far beyond the
rounding of the goodput's few operations, so it is never the grid's float maximum. Valued by the
same formula, in grid order, the candidates give the grid's answer to the bit. A point equal to
an earlier one in both numbers is left out (it ties with it and comes later). A segment with
more than `NARROW` candidates is `wide`: its rows value their whole grid. So is each table's last
segment, beyond `FAR` times its largest batch: there efficiency is ~1 at every batch, and points
of equal throughput come within `EPS` of each other.

An envelope costs ~0.07 ms a table (all pairs of its points, in numpy) and saves ~0.1 us a row,
so the grids' memo (efficiency._GridMemo) makes a table's once the table has valued
ENVELOPE_AFTER_ROWS rows on its grid: a scheduler meets a few shapes round after round (the 60
of 100-job random rounds), and a world of many one-off shapes (PAL's measured variability scales
each GPU's speed) pays for few.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["EPS", "NARROW", "NO_ENVELOPES", "Envelopes"]

EPS = 1e-9  # relative: goodput's rounding is ~1e-15
NARROW = 4  # candidates a segment may have and still be valued alone (most have 2 or 3)
FAR = 1e3  # noise scales beyond FAR x a table's largest batch value the whole grid
_TABLES_AT_ONCE = 256  # a chunk's (tables x points x points) temporaries: 5 MB of floats


@dataclass(frozen=True)
class Envelopes:
    """The segments of the envelopes of some numbered tables, in (table, start) order.

    keys[s] is table + 1j * start: numpy orders complex numbers by their real part, then their
    imaginary part, so one searchsorted finds every row's segment (each table's first starts at
    0). points[s] are its candidates in grid order (padded with its first), wide[s] whether it has
    more than NARROW. Immutable: a table's envelope is added by making a new one (`with_tables`),
    so rounds solved in threads at once read one whole."""

    keys: np.ndarray
    points: np.ndarray
    wide: np.ndarray

    def with_tables(self, tables: np.ndarray, throughput: np.ndarray, total_bsz: np.ndarray) -> Envelopes:
        """These envelopes and those of `tables` (numbers not among them) from their points
        (tables x points: T_k and M_k)."""
        if not len(tables):
            return self
        parts = [_envelope(throughput[i:i + _TABLES_AT_ONCE], total_bsz[i:i + _TABLES_AT_ONCE], tables[i:i + _TABLES_AT_ONCE])
                 for i in range(0, len(tables), _TABLES_AT_ONCE)]
        keys, points, wide = (np.concatenate([mine, *theirs]) for mine, theirs in
                              zip((self.keys, self.points, self.wide), zip(*parts)))
        order = np.argsort(keys, kind="stable")
        return Envelopes(keys[order], points[order], wide[order])

    def candidates(self, table: np.ndarray, noise_scale: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each row's candidate points (rows x NARROW) on its `table` (one of these envelopes') at its
        noise scale (>= 0, inf allowed), and which rows are on a wide segment."""
        at = np.empty(len(table), dtype=complex)
        at.real, at.imag = table, noise_scale
        segment = np.searchsorted(self.keys, at, side="right") - 1
        return self.points[segment], self.wide[segment]


NO_ENVELOPES = Envelopes(np.empty(0, dtype=complex), np.empty((0, NARROW), dtype=np.intp), np.empty(0, dtype=bool))


def _envelope(thr: np.ndarray, total: np.ndarray, numbers: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The segments of a chunk of tables (tables x points: T_k and M_k, numbered `numbers`), every
    pair of a table's points at once: their keys, candidates and wide flags (Envelopes), unordered."""
    tables, points = thr.shape
    earlier = np.tri(points, k=-1, dtype=bool)  # [k, j]: j comes before k
    repeat = ((thr[:, :, None] == thr[:, None, :]) & (total[:, :, None] == total[:, None, :]) & earlier).any(axis=2)
    live = (thr > 0) & ~repeat  # the lines: points that run, each (T, M) once
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        a = np.divide(1.0, thr, out=np.full_like(thr, np.inf), where=live)
        b = np.divide(total, thr, out=np.full_like(thr, np.inf), where=live)
        da = a[:, :, None] - a[:, None, :]  # [k, j]: a_k - a_j
        db = b[:, None, :] - b[:, :, None]  # [k, j]: b_j - b_k
        cross = db / da  # x_kj: k is below j for phi >= x_kj where j is steeper, <= x_kj where flatter
        other = live[:, None, :]
        start = np.max(np.where((da < 0) & other, cross, 0.0), axis=2, initial=0.0)
        end = np.min(np.where((da > 0) & other, cross, np.inf), axis=2, initial=np.inf)
        parallel_below = ((da == 0) & (db < 0) & other).any(axis=2)
        cap = FAR * total.max(axis=1)
        end = np.minimum(end, cap[:, None])
        on = live & ~parallel_below & (start < end)
        # within EPS of the envelope at a segment's start or at its end
        near = np.zeros(da.shape, dtype=bool)
        for at in (start, end):
            near |= a[:, None, :] * at[:, :, None] + b[:, None, :] <= (a * at + b)[:, :, None] * (1 + EPS)
    near &= live[:, None, :]
    table, line = np.nonzero(on)
    # beyond each table's cap, one wide segment; a table without lines (no point runs: the grid's
    # argmax of zeros is point 0) is one segment of its live points, as is one whose envelope
    # rounding left empty (none seen)
    bare = np.flatnonzero(~on.any(axis=1))
    every = np.arange(tables)
    picked = np.concatenate([near[table, line], live[bare], live])
    wide = np.concatenate([np.zeros(len(table) + len(bare), dtype=bool), np.ones(tables, dtype=bool)])
    table = np.concatenate([table, bare, every])
    seg_start = np.concatenate([start[on], np.zeros(len(bare)), cap])
    count = picked.sum(axis=1)
    count[count == 0] = 1  # a bare table's point 0
    first_points = np.argsort(~picked, axis=1, kind="stable")[:, :NARROW]  # the candidates first, in grid order
    pad = np.arange(NARROW) >= np.minimum(count, NARROW)[:, None]
    chosen = np.where(pad, first_points[:, :1], first_points)
    keys = np.empty(len(table), dtype=complex)
    keys.real, keys.imag = numbers[table], seg_start
    return keys, chosen.astype(np.intp), wide | (count > NARROW)
