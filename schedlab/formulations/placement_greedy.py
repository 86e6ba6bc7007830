"""PAL's greedy placement as published (Jain et al. SC'24, Alg. 1), in numpy.

A formulation, not a policy, because the exact placement model (formulations.placement_round)
is warm-started from it and falls back to it, and formulations do not import policies;
policies.placement runs it as the `pal` policy, beside the other greedy placements.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from schedlab.formulations.placement_problem import Placement, PlacementInput

__all__ = ["pal_greedy"]


def pal_greedy(pi: PlacementInput, rng: np.random.Generator) -> Placement:
    """PAL's greedy placement as published (Jain et al. SC'24, Alg. 1).

    Per class, entries (sf, within one node) are costed sf and (sf, across nodes) sf x L, L the
    across-node factor, and sorted by cost; jobs of the most variability-sensitive class (the
    widest range of slowdowns) first, each takes the cheapest entry that fits.

    The cheapest entries that fit are found directly rather than by walking the sorted entries:
    within one node, the least level at which some node has G_j free GPUs (the smallest G_j-th
    slowdown over nodes); across nodes, the G_j-th smallest free slowdown. Ties go as in the entry
    order: within before across, then the tightest node (fewest GPUs at or under the level), then
    node and GPU ids. O(J x N) numpy work, so a 65,536-GPU round takes seconds, not hours.

    Parameters
    ----------
    pi
        The GPUs offered and the jobs to place (they fit: PlacementInput checks it).
    rng
        Unused: PAL's greedy is deterministic; every placement function takes one.

    Returns
    -------
    Placement
        Job id -> GPU ids, in the jobs' input order.
    """
    state = _GreedyState.of(pi)
    sensitivity = {c: float(np.ptp(sf)) for c, sf in state.sf.items()}
    order = sorted(range(len(pi.jobs)), key=lambda j: (-sensitivity[pi.jobs[j].app_class], j))
    out = {}
    for j in order:
        job = pi.jobs[j]
        out[job.id] = tuple(pi.gpus[g].id for g in state.take(job.app_class, job.num_gpus, pi.across_node))
    return {job.id: out[job.id] for job in pi.jobs}


@dataclass
class _GreedyState:
    """The free GPUs, per class, kept sorted for PAL's two kinds of entry.

    rows[c][n] are the slowdowns of node n's free GPUs ascending (by slowdown, then GPU id;
    padded with inf) and gpu_rows[c][n] their GPU indices (-1 padding); across[c] is every GPU
    in (slowdown, node id, GPU id) order.
    """

    sf: dict[str, np.ndarray]
    rows: dict[str, np.ndarray]
    gpu_rows: dict[str, np.ndarray]
    across: dict[str, np.ndarray]
    first_free: dict[str, int]  # across[c][:first_free[c]] are all taken
    node_of: np.ndarray  # GPU index -> node index (nodes in id order)
    free: np.ndarray

    @classmethod
    def of(cls, pi: PlacementInput) -> _GreedyState:
        """Every GPU of `pi` free, for the classes of its jobs."""
        classes = sorted({j.app_class for j in pi.jobs})
        gpu_rank = np.argsort(np.argsort([g.id for g in pi.gpus], kind="stable"), kind="stable")
        node_ids = sorted({g.node for g in pi.gpus})
        node_of = np.searchsorted(node_ids, [g.node for g in pi.gpus])
        per_node = np.bincount(node_of, minlength=len(node_ids)) if pi.gpus else np.zeros(0, int)
        width = int(per_node.max(initial=0))
        sf = {c: np.array([g.slowdown[c] for g in pi.gpus], dtype=float) for c in classes}
        rows, gpu_rows, across = {}, {}, {}
        for c in classes:
            by_node = np.lexsort((gpu_rank, sf[c], node_of))  # node, then slowdown, then GPU id
            slot = np.arange(len(pi.gpus)) - np.repeat(np.cumsum(per_node) - per_node, per_node)
            rows[c] = np.full((len(node_ids), width), np.inf)
            gpu_rows[c] = np.full((len(node_ids), width), -1)
            rows[c][node_of[by_node], slot] = sf[c][by_node]
            gpu_rows[c][node_of[by_node], slot] = by_node
            across[c] = np.lexsort((gpu_rank, node_of, sf[c]))
        return cls(sf, rows, gpu_rows, across, dict.fromkeys(classes, 0), node_of, np.ones(len(pi.gpus), bool))

    def take(self, app_class: str, need: int, across_factor: float) -> np.ndarray:
        """The GPUs PAL's entry order gives a job of `need` GPUs, marked taken."""
        rows, gpu_rows = self.rows[app_class], self.gpu_rows[app_class]
        spread = self._across(app_class, need)
        level = np.inf
        if need <= rows.shape[1] and len(rows):
            col = rows[:, need - 1]
            level = col.min()
        if level <= self.sf[app_class][spread[-1]] * across_factor:
            fits = col == level  # the nodes that fit at the level; the tightest holds the fewest GPUs at or under it
            tight = int(np.argmax(fits))  # the first node on ties, and where every fitting node is full
            for count in range(need, rows.shape[1]):  # nodes with just `count` GPUs at or under the level
                tighter = fits & (rows[:, count] > level)
                if tighter.any():
                    tight = int(np.argmax(tighter))
                    break
            chosen = gpu_rows[tight, :need].copy()  # a copy: _remove rewrites the row
        else:
            chosen = spread
        self._remove(chosen)
        return chosen

    def _across(self, app_class: str, need: int) -> np.ndarray:
        order, start = self.across[app_class], self.first_free[app_class]
        while not self.free[order[start]]:  # past the taken prefix, once per GPU in all
            start += 1
        self.first_free[app_class] = start
        found: list[int] = []
        while len(found) < need:  # in chunks: the free GPUs are mostly near the front
            chunk = order[start:start + 4 * need + 64]
            found.extend(chunk[self.free[chunk]][: need - len(found)])
            start += len(chunk)
        return np.array(found)

    def _remove(self, gpus: np.ndarray) -> None:
        self.free[gpus] = False
        for n in np.unique(self.node_of[gpus]):
            for c in self.rows:
                row = self.gpu_rows[c][n]
                keep = (row >= 0) & self.free[row]
                kept = int(keep.sum())
                self.rows[c][n, :kept] = self.rows[c][n, keep]
                self.gpu_rows[c][n, :kept] = row[keep]
                self.rows[c][n, kept:] = np.inf
                self.gpu_rows[c][n, kept:] = -1
