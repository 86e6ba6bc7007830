"""The joint round's index sets (joint.py's docstring), shared by its arrays, its decoding and its greedy.

`structure` finds them in the options: the stayers of each node, the demands, slots,
definitions and counts some option uses, and the patterns of every heterogeneous node
(`pool_patterns`: Pi_k, the ways its stayers, new jobs and a whole-node taker can share it out).
`offsets` says where each block of columns starts in the array layout.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass
from functools import cache

from schedlab.formulations.joint_options import MULTI, SINGLE, JointOptions, Pool, vector_partitions

__all__ = ["Offsets", "Structure", "offsets", "part_counts", "pool_patterns", "structure"]


@dataclass(frozen=True)
class Structure:
    """joint.py's index sets, as the arrays, decode and the greedy index them.

    Indices are positions: options c, cluster node indices k, pools p, slices s, slots (into
    JointOptions.slots), definitions e (into JointOptions.multi), groups (into JointOptions.groups).
    Only the demands, slots, definitions and counts some option uses get rows and columns. The
    Pyomo twin finds its own sets from the options (joint.py's `_names`), so that the two builds check each other.
    """

    single_stayer: dict[int, tuple[int, int]]  # homogeneous node k in K1 -> (stay option, h_kc)
    multi_stayer: dict[int, list[tuple[int, int]]]  # homogeneous node k in K2 -> [(c, h_kc)]
    het_stayers: dict[int, dict[int, tuple[int, ...]]]  # heterogeneous pool -> stay option -> h_kc.
    demands: tuple[int, ...]  # the demands some single option names, in (demand) row order
    y_cols: tuple[int, ...]  # slot of every y, in column order
    z_cols: tuple[tuple[int, int], ...]  # (definition, pool) of every z, in column order
    q_cols: tuple[tuple[int, int], ...]  # (definition, n) of every q, in column order
    rack_rows: tuple[tuple[int, int], ...]  # (group, n) of every (rack) row
    w_cols: tuple[tuple[int, int], ...]  # (node, level) of every w, in column order
    u_cols: tuple[tuple[int, tuple[int, ...], tuple[tuple[int, ...], ...]], ...]  # (pool, S, P) of every u
    comp_rows: tuple[tuple[int, tuple[int, ...]], ...]  # (pool, m) of every (comp) row

    @property
    def num_cols(self) -> int:
        """Columns after x: y, z, q, w and u."""
        return len(self.y_cols) + len(self.z_cols) + len(self.q_cols) + len(self.w_cols) + len(self.u_cols)


def structure(opts: JointOptions) -> Structure:
    """joint.py's index sets of the options.

    A homogeneous node held by one stay option is in K1, by several in K2 (which gets w_kd
    slots for every level d); a heterogeneous node's stayers are counted per slice (h_kcs). y has
    a column per slot of a demand some single option names; z per (definition, pool) and q per
    (definition, n) of the groups and counts some multi option names; u per pattern of a
    heterogeneous node (`pool_patterns`).
    """
    cl = opts.cluster
    holders: dict[int, list[tuple[int, int]]] = {}
    het_stayers: dict[int, dict[int, tuple[int, ...]]] = {}
    for j, held in opts.stay_gpus.items():
        c = opts.stay_option(j)
        for k, gpus in held.items():
            pool = cl.pools[cl.pool_of[k]]
            if pool.homogeneous:
                holders.setdefault(k, []).append((c, len(gpus)))
            else:
                het_stayers.setdefault(cl.pool_of[k], {})[c] = tuple(len(set(gpus) & set(m)) for m in pool.slices)
    single, multi = opts.kind == SINGLE, opts.kind == MULTI
    demands = tuple(sorted(set(opts.ref[single].tolist())))
    wanted = set(demands)
    y_cols = tuple(i for i, slot in enumerate(opts.slots) if slot.demand in wanted)
    rack_rows = tuple(sorted(set(zip(opts.ref[multi].tolist(), opts.num_nodes[multi].tolist()))))
    counts_of: dict[int, set[int]] = {}
    for g, n in rack_rows:
        counts_of.setdefault(g, set()).add(n)
    defs = [e for g in sorted(counts_of) for e in opts.groups[g].defs]
    z_cols = tuple((e, p) for e in defs for p in opts.multi[e].pools)
    q_cols = tuple((e, n) for e in defs for n in opts.multi[e].counts if n in counts_of[opts.multi[e].group])
    multi_stayer = {k: hs for k, hs in holders.items() if len(hs) > 1}
    w_cols = tuple((k, d) for k in sorted(multi_stayer) for d in cl.pools[cl.pool_of[k]].levels)
    used: dict[int, set[tuple[int, ...]]] = {}
    for i in y_cols:
        if not cl.pools[opts.slots[i].pool].homogeneous:
            used.setdefault(opts.slots[i].pool, set()).add(opts.slots[i].comp)
    u_cols = tuple((p, stay, pattern) for p, pool in enumerate(cl.pools) if not pool.homogeneous
                   for stay, pattern in pool_patterns(pool, het_stayers.get(p, {}), used.get(p, set())))
    comp_rows = tuple((p, m) for p in sorted(used) for m in sorted(used[p]))
    return Structure({k: hs[0] for k, hs in holders.items() if len(hs) == 1}, multi_stayer, het_stayers,
                     demands, y_cols, z_cols, q_cols, rack_rows, w_cols, u_cols, comp_rows)


def pool_patterns(pool: Pool, stayers: dict[int, tuple[int, ...]], used: set[tuple[int, ...]]
              ) -> list[tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]]:
    """The patterns (S, P) of a heterogeneous node: S a set of its stay options, P the parts of a
    vector partition of the GPUs they leave (`vector_partitions`), only the parts in `used`
    kept (the others serve no slot), and of the P of one S only the maximal ones."""
    order = sorted(stayers)
    shape = tuple(len(members) for members in pool.slices)
    return [(tuple(order[i] for i in stay), pattern)
            for stay, pattern in _node_patterns(shape, tuple(stayers[c] for c in order), frozenset(used))]


@cache
def _node_patterns(shape: tuple[int, ...], holds: tuple[tuple[int, ...], ...], used: frozenset[tuple[int, ...]]
                   ) -> tuple[tuple[tuple[int, ...], tuple[tuple[int, ...], ...]], ...]:
    """`pool_patterns` of a node of slices `shape` whose stayers hold `holds`, stayers by position:
    alike nodes share one enumeration."""
    out = []
    for size in range(len(holds) + 1):
        for stay in itertools.combinations(range(len(holds)), size):
            left = tuple(t - sum(holds[c][s] for c in stay) for s, t in enumerate(shape))
            kept = sorted({tuple(m for m in pattern if m in used) for pattern in vector_partitions(left)})
            counts = [Counter(pattern) for pattern in kept]
            out += [(stay, pattern) for pattern, count in zip(kept, counts)
                    if not any(other != count and all(other[m] >= k for m, k in count.items()) for other in counts)]
    return tuple(out)


@cache
def part_counts(pattern: tuple[tuple[int, ...], ...]) -> tuple[tuple[tuple[int, ...], int], ...]:
    """cnt_pi(m) of a pattern's parts P: each composition m with how many parts equal it (alike
    nodes meet the same patterns round after round)."""
    return tuple(Counter(pattern).items())


@dataclass(frozen=True)
class Offsets:
    """Where each block of columns starts: x at 0, then y, z, q, w, u (and t)."""

    y: int
    z: int
    q: int
    w: int
    u: int
    end: int


def offsets(opts: JointOptions, st: Structure) -> Offsets:
    """Where x, y, z, q, w, u and t start in the array layout of these options and sets."""
    y = opts.num_options
    z = y + len(st.y_cols)
    q = z + len(st.z_cols)
    w = q + len(st.q_cols)
    u = w + len(st.w_cols)
    return Offsets(y, z, q, w, u, u + len(st.u_cols))
