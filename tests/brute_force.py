"""Exhaustive enumeration of a tiny round, independent of the round model's capacity rows.

Every job takes none or one of its options; a combination counts only if its options can be
placed on concrete nodes: a stay option needs its GPUs' nodes to keep that many GPUs free
(GPUs within a node are interchangeable), a new option of n nodes x z GPUs needs n distinct
nodes of its group with z free GPUs each, found by backtracking over nodes.
"""

from __future__ import annotations

import itertools

import numpy as np

from schedlab.formulations.options import OptionSet


def _place(free: list[int], nodes: tuple[int, ...], n: int, z: int):
    """Every way to take z GPUs on each of n distinct nodes (nodes differ: later stays need some)."""
    for combo in itertools.combinations(nodes, n):
        if all(free[k] >= z for k in combo):
            yield combo


def feasible_choices(opts: OptionSet) -> list[tuple[int | None, ...]]:
    """All combinations (one option index or None per job) that fit on concrete nodes."""
    free0 = [n.gpus for n in opts.round_input.cluster.nodes]
    per_job = [np.flatnonzero(opts.job == j).tolist() for j in range(opts.num_jobs)]
    out: list[tuple[int | None, ...]] = []

    def dfs(j: int, free: list[int], chosen: list[int | None]) -> None:
        if j == opts.num_jobs:
            out.append(tuple(chosen))
            return
        dfs(j + 1, free, chosen + [None])
        for c in per_job[j]:
            if opts.group[c] < 0:
                held = opts.stay_nodes[j]
                if all(free[k] >= h for k, h in held.items()):
                    nxt = free.copy()
                    for k, h in held.items():
                        nxt[k] -= h
                    dfs(j + 1, nxt, chosen + [c])
                continue
            grp = opts.groups[opts.group[c]]
            n = int(opts.num_nodes[c])
            z = int(opts.num_gpus[c]) if n == 1 else grp.gpus_per_node
            for combo in _place(free, grp.nodes, n, z):
                nxt = free.copy()
                for k in combo:
                    nxt[k] -= z
                dfs(j + 1, nxt, chosen + [c])

    dfs(0, free0, [])
    return out


def best_objective(opts: OptionSet, choices: list[tuple[int | None, ...]]) -> float:
    """The best objective over the combinations, restated from the model's definition:
    sum_j (U(s'_c) if job j takes c else U0_j); for max-min, 1000 |J| min_j s'_j + that sum."""
    chosen = np.array([[-1 if c is None else c for c in combo] for combo in choices], dtype=int)
    taken = chosen >= 0
    util = np.where(taken, opts.utility[np.maximum(chosen, 0)], opts.U0[None, :])
    total = util.sum(axis=1)
    if opts.round_input.settings.max_min:
        speed = np.where(taken, opts.penalized_speedup[np.maximum(chosen, 0)], 0.0)
        total = 1e3 * opts.num_jobs * speed.min(axis=1) + total
    return float(total.max())
