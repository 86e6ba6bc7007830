"""The joint round's index sets (joint.py's docstring), shared by its arrays, its decoding and its greedy.

`structure` finds them in the options: the stayers of each node, the bins of the heterogeneous
pools' nodes running jobs (`Bin`), the demands, slots, definitions and counts some option uses,
and the patterns of every heterogeneous pool (`pool_patterns`: Pi_w, the ways its nodes' running
jobs and new jobs can share one out).
`offsets` says where each block of columns starts in the array layout.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass
from functools import cache

from schedlab.formulations.joint_options import MULTI, SINGLE, JointOptions, vector_partitions
from schedlab.milp import check_build_deadline

__all__ = ["Bin", "Offsets", "Structure", "offsets", "part_counts", "pool_patterns", "structure"]


@dataclass(frozen=True)
class Bin:
    """Nodes of a heterogeneous pool that running jobs hold alike (B_w of joint.py): the nodes with
    one stay option holding h GPUs per slice, or a node with several alone. Position i of a bin
    is a stayer of each of its nodes, each holding `holds[i]`."""

    pool: int
    nodes: tuple[int, ...]  # cluster indices
    holds: tuple[tuple[int, ...], ...]  # h_i, per position: GPUs held on each slice
    stayers: tuple[tuple[int, ...], ...]  # per node: its stay option at each position

    @property
    def lone(self) -> bool:
        """Whether it is one node with several stayers, which takes one pattern at most ((lone))."""
        return len(self.holds) > 1


@dataclass(frozen=True)
class Structure:
    """joint.py's index sets, as the arrays, decode and the greedy index them.

    Indices are positions: options c, cluster node indices k, pools p, kinds f, slices s, slots
    (into JointOptions.slots), definitions e (into JointOptions.multi), groups (into
    JointOptions.groups), bins b (into `bins`). Only the demands, slots, definitions and counts
    some option uses get rows and columns. The Pyomo twin finds its own sets from the options
    (joint.py's `_names`), so that the two builds check each other.
    """

    single_stayer: dict[int, tuple[int, int]]  # homogeneous node k in K1 -> (stay option, h_kc)
    multi_stayer: dict[int, list[tuple[int, int]]]  # homogeneous node k in K2 -> [(c, h_kc)]
    bins: tuple[Bin, ...]  # of every heterogeneous pool with running jobs
    demands: tuple[int, ...]  # the demands some single option names, in (demand) row order
    y_cols: tuple[int, ...]  # slot of every y, in column order
    z_cols: tuple[tuple[int, int], ...]  # (definition, pool) of every z, in column order
    q_cols: tuple[tuple[int, int], ...]  # (definition, n) of every q, in column order
    rack_rows: tuple[tuple[int, int], ...]  # (group, n) of every (rack) row
    w_cols: tuple[tuple[int, int], ...]  # (node, level) of every w, in column order
    # (pool, bin (-1: a free pattern), S as positions of the bin, P) of every u
    u_cols: tuple[tuple[int, int, tuple[int, ...], tuple[tuple[int, ...], ...]], ...]
    comp_rows: tuple[tuple[int, tuple[int, ...]], ...]  # (kind, m) of every (comp) row

    @property
    def num_cols(self) -> int:
        """Columns after x: y, z, q, w and u."""
        return len(self.y_cols) + len(self.z_cols) + len(self.q_cols) + len(self.w_cols) + len(self.u_cols)


def structure(opts: JointOptions) -> Structure:
    """joint.py's index sets of the options.

    A homogeneous node held by one stay option is in K1, by several in K2 (which gets w_kd
    slots for every level d); the held nodes of a heterogeneous pool are binned (`Bin`: by what
    their one stayer holds per slice, or alone). y has a column per slot of a demand some single
    option names; z per (definition, pool) and q per (definition, n) of the groups and counts
    some multi option names; u per pattern of a heterogeneous pool: the free ones, then each
    bin's (`pool_patterns`).
    """
    cl = opts.cluster
    holders: dict[int, list[tuple[int, int]]] = {}
    het_held: dict[int, dict[int, tuple[int, ...]]] = {}  # heterogeneous node -> stay option -> h_kc.
    for j, held in opts.stay_gpus.items():
        c = opts.stay_option(j)
        for k, gpus in held.items():
            if cl.pools[cl.pool_of[k]].homogeneous:
                holders.setdefault(k, []).append((c, len(gpus)))
            else:
                het_held.setdefault(k, {})[c] = tuple(len(set(gpus) & set(m)) for m in cl.slices_of[k])
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
        slot = opts.slots[i]
        if not cl.kinds[slot.kind].homogeneous:
            used.setdefault(slot.kind, set()).add(slot.comp)
    bins = _bins(cl.pool_of, het_held)
    bins_of: dict[int, list[int]] = {}
    for b, bin_ in enumerate(bins):
        bins_of.setdefault(bin_.pool, []).append(b)
    u_cols = []
    for p, pool in enumerate(cl.pools):
        if pool.homogeneous:
            continue
        mine = frozenset(used.get(pool.kind, ()))
        u_cols += [(p, -1, stay, pattern) for stay, pattern in pool_patterns(pool.shape, (), mine)]
        u_cols += [(p, b, stay, pattern) for b in bins_of.get(p, ())
                   for stay, pattern in pool_patterns(pool.shape, bins[b].holds, mine) if stay]
    comp_rows = tuple((f, m) for f in sorted(used) for m in sorted(used[f]))
    return Structure({k: hs[0] for k, hs in holders.items() if len(hs) == 1}, multi_stayer, bins,
                     demands, y_cols, z_cols, q_cols, rack_rows, w_cols, tuple(u_cols), comp_rows)


def _bins(pool_of: dict[int, int], held: dict[int, dict[int, tuple[int, ...]]]) -> tuple[Bin, ...]:
    """The bins of the held heterogeneous nodes (`Bin`), by pool and first node."""
    alike: dict[tuple[int, tuple[int, ...]], list[int]] = {}  # (pool, h) -> nodes with one stayer holding h
    bins = []
    for k in sorted(held):
        if len(held[k]) == 1:
            alike.setdefault((pool_of[k], next(iter(held[k].values()))), []).append(k)
        else:
            order = sorted(held[k])
            bins.append(Bin(pool_of[k], (k,), tuple(held[k][c] for c in order), (tuple(order),)))
    bins += [Bin(p, tuple(nodes), (h,), tuple((next(iter(held[k])),) for k in nodes)) for (p, h), nodes in alike.items()]
    return tuple(sorted(bins, key=lambda b: (b.pool, b.nodes[0])))


@cache
def pool_patterns(shape: tuple[int, ...], holds: tuple[tuple[int, ...], ...], used: frozenset[tuple[int, ...]]
                  ) -> tuple[tuple[tuple[int, ...], tuple[tuple[int, ...], ...]], ...]:
    """The patterns (S, P) of a node of slices `shape` whose stayers, by position, hold `holds`:
    S a set of positions, P the parts of a vector partition of the GPUs they leave
    (`vector_partitions`), only the parts in `used` kept (the others serve no slot), and of the
    P of one S only the maximal ones. Alike nodes share one enumeration."""
    out = []
    for size in range(len(holds) + 1):
        for stay in itertools.combinations(range(len(holds)), size):
            check_build_deadline(f"the patterns of a node of {sum(shape)} GPUs in {len(shape)} slices of tiers")
            left = tuple(t - sum(holds[c][s] for c in stay) for s, t in enumerate(shape))
            kept = sorted({tuple(m for m in pattern if m in used) for pattern in vector_partitions(left)})
            out += [(stay, pattern) for pattern in _maximal(kept)]
    return tuple(out)


def _maximal(patterns: list[tuple[tuple[int, ...], ...]]) -> list[tuple[tuple[int, ...], ...]]:
    """The distinct `patterns` (multisets of parts) that no other one contains, in their order.
    A pattern is contained in those that hold each of its parts at least as often: the
    intersection, as bit sets, of who holds part m k times. Comparing every pair took 24 s a
    round on nodes of 8 GPUs in 6 slices of tiers (tier_tolerance 0.01: up to 1,663 patterns)."""
    counts = [Counter(pattern) for pattern in patterns]
    holders: dict[tuple[tuple[int, ...], int], int] = {}  # (part, k) -> the patterns holding it k times or more
    for i, count in enumerate(counts):
        for m, k in count.items():
            for times in range(1, k + 1):
                holders[m, times] = holders.get((m, times), 0) | 1 << i
    every = (1 << len(patterns)) - 1
    out = []
    for i, (pattern, count) in enumerate(zip(patterns, counts)):
        others = every & ~(1 << i)
        for m, k in count.items():
            others &= holders[m, k]
        if not others:
            out.append(pattern)
    return out


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
