"""A joint round's point on concrete GPUs (`decode`), and feasible points found greedily
(`greedy_point`; under max-min also `max_min_point`), the answer when a solver has none:
joint.py's docstring argues why decoding never fails; the verifier checks anyway.
"""

from __future__ import annotations

from collections import Counter
from itertools import chain

import numpy as np

from schedlab.errors import DecodeError
from schedlab.formulations.greedy import max_min_floor
from schedlab.formulations.joint_options import MULTI, SINGLE, STAY, JointOptions
from schedlab.formulations.joint_structure import Structure, offsets, part_counts
from schedlab.formulations.options import job_allocations
from schedlab.formulations.packing import NodeState
from schedlab.state import GpuRef, JobAllocation

__all__ = ["decode", "greedy_point", "max_min_point"]


def decode(opts: JointOptions, st: Structure, values: np.ndarray) -> tuple[JobAllocation, ...]:
    """Concrete GPUs and batches of every job from a point of the model (array layout).

    The chosen options (x_c > 0.5) are placed as joint.py's docstring argues they always fit:
    stayers on their GPUs; then each definition's z whole nodes, handed to the jobs its q
    counts send it; then the slots y, matched to the single options of their demand, largest
    first on the tightest node of their homogeneous pool (packing.NodeState) and composition by
    composition on heterogeneous nodes.

    Raises
    ------
    DecodeError
        When a chosen option does not fit (a point that breaks a row).
    """
    jobs = opts.round_input.jobs
    at = offsets(opts, st)
    counts = np.rint(np.asarray(values[: at.end], dtype=float)).astype(int)
    chosen = np.asarray(values[: opts.num_options]) > 0.5
    state = NodeState(opts.round_input.cluster)
    picked = np.flatnonzero(chosen)
    gpus_of: dict[int, tuple[GpuRef, ...]] = {}
    for c in picked[opts.kind[picked] == STAY]:
        job = jobs[opts.job[c]]
        if not state.take_exact(job.current_gpus):
            raise DecodeError(f"job {job.id!r} cannot stay: its GPUs are taken")
        gpus_of[c] = job.current_gpus
    gpus_of |= _decode_multi(opts, st, counts, picked, state)
    gpus_of |= _decode_singles(opts, st, counts, picked, state)
    return job_allocations(opts, picked, gpus_of)


def _decode_multi(opts: JointOptions, st: Structure, counts: np.ndarray, picked: np.ndarray,
                  state: NodeState) -> dict[int, tuple[GpuRef, ...]]:
    """The chosen multi options' GPUs: each definition's z whole nodes, n to each job q sends it."""
    cl, cluster, jobs = opts.cluster, opts.round_input.cluster, opts.round_input.jobs
    at = offsets(opts, st)
    whole: dict[int, list[int]] = {}  # definition -> its whole nodes (node indices)
    for i in np.flatnonzero(counts[at.z: at.q]).tolist():  # most of the columns are 0
        (e, p), count = st.z_cols[i], int(counts[at.z + i])
        pool = cl.pools[p]
        taken = state.take_shape(pool.nodes, count, pool.gpus_per_node)
        if taken is None:
            raise DecodeError(f"no {count} free whole nodes in pool {p}")
        whole.setdefault(e, []).extend(sorted({state.index[ref.node] for ref in taken}))
    seats: dict[tuple[int, int], list[int]] = {}  # (group, n) -> a definition per job it takes
    for i in np.flatnonzero(counts[at.q: at.w]).tolist():
        e, n = st.q_cols[i]
        seats.setdefault((opts.multi[e].group, n), []).extend([e] * int(counts[at.q + i]))
    out = {}
    multi = picked[opts.kind[picked] == MULTI]
    for c in multi:
        key = (int(opts.ref[c]), int(opts.num_nodes[c]))
        if not seats.get(key):
            raise DecodeError(f"no definition of multi-node group {key[0]} left for job {jobs[opts.job[c]].id!r}")
        e = seats[key].pop()
        mine, whole[e] = whole.get(e, [])[: key[1]], whole.get(e, [])[key[1]:]
        if len(mine) < key[1]:
            raise DecodeError(f"definition {e} has {len(mine)} whole nodes left, job {jobs[opts.job[c]].id!r} takes {key[1]}")
        out[c] = tuple(chain.from_iterable(map(cluster.node_refs, mine)))
    return out


def _decode_singles(opts: JointOptions, st: Structure, counts: np.ndarray, picked: np.ndarray,
                    state: NodeState) -> dict[int, tuple[GpuRef, ...]]:
    """The chosen single options' GPUs: each matched to a slot of its demand, then placed: on the
    tightest node of a homogeneous group, or on a heterogeneous node's part of its composition
    (`_seats`)."""
    cl, cluster, jobs = opts.cluster, opts.round_input.cluster, opts.round_input.jobs
    nodes = cluster.nodes
    at = offsets(opts, st)
    free_slots: dict[int, list[int]] = {}  # demand -> a slot per job it can take
    for i in np.flatnonzero(counts[at.y: at.z]).tolist():
        s = st.y_cols[i]
        free_slots.setdefault(opts.slots[s].demand, []).extend([s] * int(counts[at.y + i]))
    placed: list[tuple[int, int]] = []  # (option, slot)
    for c in picked[opts.kind[picked] == SINGLE]:
        left = free_slots.get(int(opts.ref[c]))
        if not left:
            raise DecodeError(f"no slot left for job {jobs[opts.job[c]].id!r} ({opts.num_gpus[c]} GPUs)")
        placed.append((int(c), left.pop()))
    seats = _seats(opts, st, counts, set(picked[opts.kind[picked] == STAY].tolist()), state)
    out = {}
    for c, s in sorted(placed, key=lambda cs: (-opts.slots[cs[1]].gpus, cs[0])):
        slot = opts.slots[s]
        kind = cl.kinds[slot.kind]
        if kind.homogeneous:
            single = state.take_shape(cl.pools[kind.pools[0]].nodes, 1, slot.gpus)
            if single is None:
                raise DecodeError(f"no room for job {jobs[opts.job[c]].id!r} ({slot.gpus} GPUs) in kind {slot.kind}")
            out[c] = single
            continue
        room = seats.get((slot.kind, slot.comp))
        if not room:
            raise DecodeError(f"no part {slot.comp} of kind {slot.kind} left for job {jobs[opts.job[c]].id!r}")
        k = room.pop()
        indices: list[int] = []
        for members, count in zip(cl.slices_of[k], slot.comp):
            free = [i for i in state.free[k] if i in members][:count]
            if len(free) < count:
                raise DecodeError(f"no room on node {nodes[k].id!r} for job {jobs[opts.job[c]].id!r}")
            indices += free
        state.set_free(k, [i for i in state.free[k] if i not in indices])
        node = cluster.node_refs(k)
        out[c] = tuple(node[i] for i in indices)
    return out


def _seats(opts: JointOptions, st: Structure, counts: np.ndarray, staying: set[int],
           state: NodeState) -> dict[tuple[int, tuple[int, ...]], list[int]]:
    """(kind, composition) -> a node per part of that composition the point's patterns give.

    Each node holding a staying job takes a pattern of its bin that keeps every such job
    ((stay), (lone)); every other pattern counted, free or a bin's, takes a node of its pool
    left whole by the stayers and the multi-node options ((node)).
    """
    cl, at = opts.cluster, offsets(opts, st)
    free_of: dict[int, list[tuple[tuple[int, ...], ...]]] = {}  # pool -> its patterns to place
    held_of: dict[int, list[tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]]] = {}  # bin -> (S, P)s
    for i in np.flatnonzero(counts[at.u: at.end]).tolist():
        p, b, stay, pattern = st.u_cols[i]
        if b < 0:
            free_of.setdefault(p, []).extend([pattern] * int(counts[at.u + i]))
        else:
            held_of.setdefault(b, []).extend([(stay, pattern)] * int(counts[at.u + i]))
    seats: dict[tuple[int, tuple[int, ...]], list[int]] = {}

    def seat(k: int, pattern: tuple[tuple[int, ...], ...]) -> None:
        for m in pattern:
            seats.setdefault((cl.pools[cl.pool_of[k]].kind, m), []).append(k)

    for k, (b, kept) in _kept_positions(st, staying).items():
        mine = held_of.setdefault(b, [])
        fit = next((x for x, (stay, _) in enumerate(mine) if kept <= set(stay)), None)
        if fit is None:
            raise DecodeError(f"node {opts.round_input.cluster.nodes[k].id!r} has no pattern keeping its jobs")
        seat(k, mine.pop(fit)[1])
    for b, left in held_of.items():
        free_of.setdefault(st.bins[b].pool, []).extend(pattern for _, pattern in left)
    for p, patterns in free_of.items():
        pool = cl.pools[p]
        whole = [k for k in pool.nodes if len(state.free[k]) == pool.gpus_per_node]
        if len(patterns) > len(whole):
            raise DecodeError(f"pool {p} has {len(whole)} free nodes for {len(patterns)} patterns")
        for k, pattern in zip(whole, patterns):
            seat(k, pattern)
    return seats


def _kept_positions(st: Structure, staying: set[int]) -> dict[int, tuple[int, set[int]]]:
    """Each heterogeneous node keeping some of its running jobs (stay options in `staying`) ->
    its bin and the positions of the jobs it keeps, in bin order."""
    out = {}
    for b, bin_ in enumerate(st.bins):
        for k, on_node in zip(bin_.nodes, bin_.stayers):
            kept = {i for i, c in enumerate(on_node) if c in staying}
            if kept:
                out[k] = (b, kept)
    return out


def greedy_point(opts: JointOptions, st: Structure) -> np.ndarray:
    """A feasible point found greedily: the fallback when a solver has none.

    Running jobs whose GPUs are still free stay; then options are taken by the utility they add
    over U0, best first: a job not yet placed takes the option if it adds value and fits
    (`_Greedy.take`). The point's y, z and q count what was taken, u the pattern each
    heterogeneous node's jobs fit (`_patterns_of`); w and t are left 0.
    """
    greedy = _Greedy(opts, st)
    for j in opts.stay_gpus:
        greedy.take(opts.stay_option(j))
    gain = opts.utility - opts.U0[opts.job]
    for c in np.argsort(-gain, kind="stable").tolist():
        if opts.job[c] not in greedy.placed and gain[c] > 0 and opts.kind[c] != STAY:
            greedy.take(c)
    return greedy.point()


def max_min_point(opts: JointOptions, st: Structure) -> np.ndarray | None:
    """Under max-min, every job served at the highest floor of s'_c that formulations.greedy's
    bisection finds (max_min_floor), taking options as `greedy_point` does; None where none is."""
    found = max_min_floor(opts.job, opts.num_gpus, opts.kind == STAY, opts.penalized_speedup, opts.num_jobs,
                          opts.round_input.cluster.total_gpus, lambda: _Greedy(opts, st))
    return None if found is None else found.point()


class _Greedy:
    """The greedy's state (a formulations.greedy.Taker): each node's free GPUs, the jobs placed,
    and the point's counts of what was taken."""

    def __init__(self, opts: JointOptions, st: Structure) -> None:
        self.opts, self.st, self.at = opts, st, offsets(opts, st)
        self.values = np.zeros(self.at.end + opts.round_input.settings.max_min)
        self.free = [set(range(node.gpus)) for node in opts.round_input.cluster.nodes]
        self.placed: set[int] = set()
        self.empty = _EmptyNodes(opts, st, self.free)
        self.y_of = {s: self.at.y + i for i, s in enumerate(st.y_cols)}
        self.slots_of: dict[int, list[int]] = {}
        for s in st.y_cols:
            self.slots_of.setdefault(opts.slots[s].demand, []).append(s)
        self.cursor = dict.fromkeys(self.slots_of, 0)  # a slot with no room now has none later: free GPUs only shrink
        self.z_of = {ep: self.at.z + i for i, ep in enumerate(st.z_cols)}
        self.q_of = {en: self.at.q + i for i, en in enumerate(st.q_cols)}
        self.parts: dict[int, list[tuple[int, ...]]] = {}  # heterogeneous node -> the compositions placed on it

    def take(self, c: int) -> bool:
        """Take option c for its job where it fits: a stay on its GPUs if they are all free; a
        multi option on empty whole nodes of the first definition of its group with enough; a
        single option in the first slot of its demand with room, on the tightest node of its
        kind. Whether it did."""
        opts, cl, j = self.opts, self.opts.cluster, int(self.opts.job[c])
        if opts.kind[c] == STAY:
            held = opts.stay_gpus[j]
            if not all(set(g) <= self.free[k] for k, g in held.items()):
                return False
            for k, g in held.items():
                self.free[k] -= set(g)
                self.empty.used(k)
        elif opts.kind[c] == MULTI:
            n = int(opts.num_nodes[c])
            e = next((e for e in opts.groups[opts.ref[c]].defs if (e, n) in self.q_of and self.empty.count[e] >= n), None)
            if e is None:
                return False
            for k in self.empty.take(e, n):
                self.free[k] = set()
                self.values[self.z_of[e, cl.pool_of[k]]] += 1
            self.values[self.q_of[e, n]] += 1
        else:
            d = int(opts.ref[c])
            mine = self.slots_of.get(d, [])
            take = None
            while self.cursor.get(d, 0) < len(mine) and (take := _room(opts, mine[self.cursor[d]], self.free)) is None:
                self.cursor[d] += 1
            if take is None:
                return False
            k, gpus = take
            self.free[k] -= gpus
            self.empty.used(k)
            slot = opts.slots[mine[self.cursor[d]]]
            if not cl.kinds[slot.kind].homogeneous:
                self.parts.setdefault(k, []).append(slot.comp)
            self.values[self.y_of[mine[self.cursor[d]]]] += 1
        self.values[c] = 1.0
        self.placed.add(j)
        return True

    def point(self) -> np.ndarray:
        """The point of what was taken, with the u column of each heterogeneous node used (`_patterns_of`)."""
        point = self.values.copy()
        for i in _patterns_of(self.opts, self.st, point, self.parts):
            point[self.at.u + i] += 1
        return point


def _room(opts: JointOptions, s: int, free: list[set[int]]) -> tuple[int, set[int]] | None:
    """(node, GPUs) slot s would take from `free`, on the tightest node of its kind that fits (its
    composition's GPUs of each slice; a homogeneous node has one slice); None if none."""
    cl, slot = opts.cluster, opts.slots[s]
    nodes = [k for p in cl.kinds[slot.kind].pools for k in cl.pools[p].nodes]
    fits = [(len(free[k]), k) for k in nodes
            if all(len(free[k] & set(members)) >= count for members, count in zip(cl.slices_of[k], slot.comp))]
    if not fits:
        return None
    k = min(fits)[1]
    return k, {i for members, count in zip(cl.slices_of[k], slot.comp) for i in sorted(free[k] & set(members))[:count]}


def _patterns_of(opts: JointOptions, st: Structure, point: np.ndarray, parts: dict[int, list[tuple[int, ...]]]) -> list[int]:
    """The u column of every heterogeneous node a point's jobs use: a pattern of its bin keeping
    its staying jobs, or a free one of its pool, with at least the compositions placed on it
    (`parts`). Every such set has one: it is part of a vector partition of what the stayers leave."""
    cl = opts.cluster
    staying = {i for i in np.flatnonzero(point[: opts.num_options] > 0.5).tolist() if opts.kind[i] == STAY}
    columns: dict[tuple[int, int], list[int]] = {}  # (pool, bin) -> its u columns
    for i, (p, b, _, _) in enumerate(st.u_cols):
        columns.setdefault((p, b), []).append(i)
    keeps = _kept_positions(st, staying)
    out = []
    for k in sorted(set(parts) | set(keeps)):
        b, kept = keeps.get(k, (-1, set()))
        need = Counter(parts.get(k, ()))
        out.append(next(i for i in columns[cl.pool_of[k], b] if kept <= set(st.u_cols[i][2])
                        and all(dict(part_counts(st.u_cols[i][3])).get(m, 0) >= n for m, n in need.items())))
    return out


class _EmptyNodes:
    """The greedy's whole free nodes: per definition, how many it has, kept as GPUs are taken."""

    def __init__(self, opts: JointOptions, st: Structure, free: list[set[int]]) -> None:
        cl, nodes = opts.cluster, opts.round_input.cluster.nodes
        self.defs = sorted({e for e, _ in st.z_cols})
        self.pools_of = {e: opts.multi[e].pools for e in self.defs}
        self.defs_of: dict[int, list[int]] = {}
        for e in self.defs:
            for p in self.pools_of[e]:
                self.defs_of.setdefault(p, []).append(e)
        self.cl = cl
        self.empty = {p: [k for k in cl.pools[p].nodes if len(free[k]) == nodes[k].gpus] for p in self.defs_of}
        self.count = {e: sum(len(self.empty[p]) for p in self.pools_of[e]) for e in self.defs}

    def used(self, k: int) -> None:
        """Node k has lost GPUs: it is no longer whole."""
        p = self.cl.pool_of[k]
        if k in self.empty.get(p, ()):
            self.empty[p].remove(k)
            for e in self.defs_of[p]:
                self.count[e] -= 1

    def take(self, e: int, n: int) -> list[int]:
        """n whole nodes of definition e, in pool order (the caller checked count[e] >= n)."""
        out = [k for p in self.pools_of[e] for k in self.empty[p]][:n]
        for k in out:
            self.used(k)
        return out
