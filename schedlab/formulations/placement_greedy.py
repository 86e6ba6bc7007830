"""PAL's greedy placement as published (Jain et al. SC'24, Alg. 1), in numpy.

A formulation, not a policy, because the exact placement model (formulations.placement_round)
is warm-started from it and falls back to it, and formulations do not import policies;
policies.placement runs it as the `pal` policy, beside the other greedy placements.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from schedlab.errors import InputError
from schedlab.formulations.placement_problem import Placement, PlacementInput, PlacementJob, pinned_placement, type_plan

__all__ = ["pal_greedy"]


def pal_greedy(pi: PlacementInput, rng: np.random.Generator) -> Placement:
    """PAL's greedy placement as published (Jain et al. SC'24, Alg. 1), within one GPU type per job.

    Per class, entries (sf, within one node) are costed sf and (sf, across nodes) sf x L, L the
    across-node factor, and sorted by cost; jobs of the most variability-sensitive class (the
    widest range of slowdowns within a GPU type) first, each takes the cheapest entry that fits.
    On a cluster of several GPU types an entry holds GPUs of one type, PAL's slowdowns compare
    GPUs within it, and its cost for a job is divided by the job's relative speed on the type
    (PlacementJob.speed_on): the job takes the cheapest entry of its types (ties: within before
    across, then the types in name order); the jobs that can run on fewer types go first, so that
    a job of one type is not crowded out of it by a job that had a choice. On one type this is
    PAL's walk. Pinned jobs are placed first, on their current GPUs (placement_problem.pinned_placement).

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

    Raises
    ------
    InputError
        When the jobs do not fit on their types together (type_plan's). Where a job's cheapest
        types crowd out a later job, the walk is made again with each job on its type_plan type.
    """
    offered = _GreedyState.types_of(pi)
    try:
        return _walk(pi, lambda job: [t for t in offered if job.speed_on(t) > 0])
    except InputError:  # a job's choice of type crowded out a later job: each on its type_plan type
        plan = type_plan(pi)
        return _walk(pi, lambda job: [plan[job.id]])


def _walk(pi: PlacementInput, types_for: Callable[[PlacementJob], list[str]]) -> Placement:
    """PAL's walk (pal_greedy), each job on the cheapest entry of the types `types_for` gives it."""
    state = _GreedyState.of(pi)
    sensitivity: dict[str, float] = {}
    for (c, _), sf in state.sf.items():  # the range within each type
        within = sf[np.isfinite(sf)]
        sensitivity[c] = max(sensitivity.get(c, 0.0), float(np.ptp(within)) if len(within) else 0.0)
    # the jobs of fewest types first, so that a job of one type still finds it free (one type: PAL's order)
    kinds = [sum(pi.jobs[j].speed_on(t) > 0 for t in state.gpu_types) for j in range(len(pi.jobs))]
    order = sorted(range(len(pi.jobs)), key=lambda j: (kinds[j], -sensitivity[pi.jobs[j].app_class], j))
    out = pinned_placement(pi)
    if out:
        index = {g.id: i for i, g in enumerate(pi.gpus)}
        state.remove(np.array([index[g] for gpus in out.values() for g in gpus]))
    for j in (j for j in order if pi.jobs[j].id not in out):
        job = pi.jobs[j]
        found = [entry for t in types_for(job)
                 for entry in state.entries(job.app_class, t, job.num_gpus, pi.across_node, job.speed_on(t))]
        if not found:
            raise InputError([f"placement: job {job.id} needs {job.num_gpus} GPUs of one type it can run on and no "
                              "such type has them free after the jobs placed before it; give the round fewer jobs"])
        *_, chosen = min(found, key=lambda e: e[:3])
        state.remove(chosen)
        out[job.id] = tuple(pi.gpus[g].id for g in chosen)
    return {job.id: out[job.id] for job in pi.jobs}


@dataclass
class _GreedyState:
    """The free GPUs, per (class, GPU type), kept sorted for PAL's two kinds of entry.

    rows[c, t][n] are the slowdowns of node n's free GPUs of type t ascending (by slowdown, then
    GPU id; padded with inf) and gpu_rows[c, t][n] their GPU indices (-1 padding); across[c, t]
    is every GPU of type t in (slowdown, node id, GPU id) order; sf[c, t] the slowdowns of every
    GPU, inf off type t.
    """

    sf: dict[tuple[str, str], np.ndarray]
    rows: dict[tuple[str, str], np.ndarray]
    gpu_rows: dict[tuple[str, str], np.ndarray]
    across: dict[tuple[str, str], np.ndarray]
    first_free: dict[tuple[str, str], int]  # across[key][:first_free[key]] are all taken
    node_of: np.ndarray  # GPU index -> node index (nodes in id order)
    free: np.ndarray
    gpu_types: tuple[str, ...]
    free_of_type: dict[str, int]
    type_of: np.ndarray  # GPU index -> its type's index in gpu_types

    @staticmethod
    def types_of(pi: PlacementInput) -> tuple[str, ...]:
        """The GPU types offered, sorted."""
        return tuple(sorted({g.gpu_type for g in pi.gpus}))

    @classmethod
    def of(cls, pi: PlacementInput) -> _GreedyState:
        """Every GPU of `pi` free, for the classes of its jobs."""
        classes = sorted({j.app_class for j in pi.jobs})
        gpu_types = cls.types_of(pi)
        type_of = np.searchsorted(gpu_types, [g.gpu_type for g in pi.gpus]) if pi.gpus else np.zeros(0, int)
        gpu_rank = np.argsort(np.argsort([g.id for g in pi.gpus], kind="stable"), kind="stable")
        node_ids = sorted({g.node for g in pi.gpus})
        node_of = np.searchsorted(node_ids, [g.node for g in pi.gpus])
        per_node = np.bincount(node_of, minlength=len(node_ids)) if pi.gpus else np.zeros(0, int)
        width = int(per_node.max(initial=0))
        sf, rows, gpu_rows, across = {}, {}, {}, {}
        for c in classes:
            every = np.array([g.slowdown[c] for g in pi.gpus], dtype=float)
            for t, gpu_type in enumerate(gpu_types):
                key, mine = (c, gpu_type), type_of == t
                sf[key] = np.where(mine, every, np.inf)
                # node, then slowdown (the type's GPUs before the others), then GPU id
                by_node = np.lexsort((gpu_rank, sf[key], ~mine, node_of))
                slot = np.arange(len(pi.gpus)) - np.repeat(np.cumsum(per_node) - per_node, per_node)
                rows[key] = np.full((len(node_ids), width), np.inf)
                gpu_rows[key] = np.full((len(node_ids), width), -1)
                rows[key][node_of[by_node], slot] = sf[key][by_node]
                gpu_rows[key][node_of[by_node], slot] = np.where(mine[by_node], by_node, -1)
                ordered = np.lexsort((gpu_rank, node_of, sf[key]))
                across[key] = ordered[mine[ordered]]
        free_of_type = {t: int((type_of == i).sum()) for i, t in enumerate(gpu_types)}
        return cls(sf, rows, gpu_rows, across, dict.fromkeys(sf, 0), node_of, np.ones(len(pi.gpus), bool), gpu_types,
                   free_of_type, type_of)

    def entries(self, app_class: str, gpu_type: str, need: int, across_factor: float,
                speed: float) -> list[tuple[float, int, int, np.ndarray]]:
        """The cheapest entry of the type that fits a job of `need` GPUs: [(cost, across?, type, GPUs)], or [].

        PAL's order on one type: the within-node entry where its level is no more than the
        across-node one's times the factor, else the across one; the cost is divided by the
        job's relative speed on the type.
        """
        if self.free_of_type[gpu_type] < need:
            return []
        key, t = (app_class, gpu_type), self.gpu_types.index(gpu_type)
        rows, gpu_rows = self.rows[key], self.gpu_rows[key]
        spread = self._across(key, need)
        across_level = self.sf[key][spread[-1]] * across_factor
        level = np.inf
        if need <= rows.shape[1] and len(rows):
            col = rows[:, need - 1]
            level = col.min()
        if level <= across_level:
            fits = col == level  # the nodes that fit at the level; the tightest holds the fewest GPUs at or under it
            tight = int(np.argmax(fits))  # the first node on ties, and where every fitting node is full
            for count in range(need, rows.shape[1]):  # nodes with just `count` GPUs at or under the level
                tighter = fits & (rows[:, count] > level)
                if tighter.any():
                    tight = int(np.argmax(tighter))
                    break
            return [(float(level) / speed, 0, t, gpu_rows[tight, :need].copy())]  # a copy: remove rewrites the row
        return [(float(across_level) / speed, 1, t, spread)]

    def _across(self, key: tuple[str, str], need: int) -> np.ndarray:
        order, start = self.across[key], self.first_free[key]
        while not self.free[order[start]]:  # past the taken prefix, once per GPU in all
            start += 1
        self.first_free[key] = start
        found: list[int] = []
        while len(found) < need:  # in chunks: the free GPUs are mostly near the front
            chunk = order[start:start + 4 * need + 64]
            found.extend(chunk[self.free[chunk]][: need - len(found)])
            start += len(chunk)
        return np.array(found)

    def remove(self, gpus: np.ndarray) -> None:
        """Mark `gpus` taken: out of every row and of their type's free count."""
        self.free[gpus] = False
        for t in self.type_of[gpus]:
            self.free_of_type[self.gpu_types[t]] -= 1
        for n in np.unique(self.node_of[gpus]):
            for key in self.rows:
                row = self.gpu_rows[key][n]
                keep = (row >= 0) & self.free[row]
                kept = int(keep.sum())
                self.rows[key][n, :kept] = self.rows[key][n, keep]
                self.gpu_rows[key][n, :kept] = row[keep]
                self.rows[key][n, kept:] = np.inf
                self.gpu_rows[key][n, kept:] = -1
