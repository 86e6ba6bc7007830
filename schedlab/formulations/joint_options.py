"""The joint round's options (C_j of joint.py's docstring) and the supply they draw on.

The cluster as the joint model sees it (`joint_cluster`): each class's GPU slowdown factors
grouped into tiers (`tiers`), nodes into pools of alike nodes of a rack (a homogeneous group, or
heterogeneous nodes with the same slices: GPUs of each signature), pools into kinds (`Kind`: a
homogeneous group alone, the heterogeneous pools of one type, size and slices over all racks) and
the bandwidth scale of a spread within a rack and across racks. What a job may take is named by
kind, not by node: a single option is a demand (d GPUs of a GPU type at a worst tier, `Demand`),
served by the slots of every kind of node (`Slot`: y's columns);
a multi option is a group of multi-node definitions (`MultiGroup`, `Multi`: one per rack of a
rack kind, or one over all racks). So a job has options per GPU type, size, tier and scope, not
per node, and the model grows with the kinds of node (`enumerate_joint_options`). Every option
is valued at its best batch in one vectorized call with the jobs' fair shares (`_value`), then
pruned of the dominated ones (`_undominated`). The options are columnar (`JointOptions`, as
options.OptionSet), so formulations.freezing folds freeze levels into them as it does for goodput's.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from functools import cache, cached_property

import numpy as np

from schedlab.formulations.options import (
    OptionCounts,
    chain_levels,
    dense_ids,
    distinct_rows,
    distinct_values,
    fair_shapes,
    field_values,
    model_index,
    model_table,
    multi_node_counts,
    node_groups,
    prune_dominated,
    restart_factors,
    stay_options,
    unallocated_utilities,
    utility,
)
from schedlab.milp import check_build_deadline
from schedlab.models.efficiency import BatchChoice, best_batch_shared
from schedlab.models.freezing import scaled_params
from schedlab.state import BatchLimits, Cluster, GradStats, JobSpec, RoundInput, ThroughputParams, Topology
from schedlab.topology import cluster_graph, spread_gbps

__all__ = ["MULTI", "SINGLE", "STAY", "Demand", "JointCluster", "JointOptions", "Kind", "Multi", "MultiGroup", "Pool", "Slot",
           "enumerate_joint_options", "joint_cluster", "tiers", "vector_partitions"]

SINGLE, MULTI, STAY = 0, 2, 3  # the kinds of option of joint.py's C_j


def tiers(values: list[float], tolerance: float) -> dict[float, float]:
    """Each slowdown factor -> its tier's value, the factors grouped into tiers.

    Walking the distinct factors in ascending order, a factor at most (1 + `tolerance`) times
    its tier's smallest joins that tier, else it starts a new one. A tier is valued at its
    largest factor, so a prediction made at the tier's value is never optimistic.

    Examples
    --------
    >>> tiers([1.0, 1.02, 1.1, 1.3], 0.05)
    {1.0: 1.02, 1.02: 1.02, 1.1: 1.1, 1.3: 1.3}
    """
    out: dict[float, float] = {}
    members: list[float] = []
    for v in sorted(set(values)):
        if members and v > members[0] * (1 + tolerance):
            out.update(dict.fromkeys(members, members[-1]))
            members = []
        members.append(v)
    out.update(dict.fromkeys(members, members[-1] if members else 1.0))
    return out


@dataclass(frozen=True)
class Pool:
    """A pool w of W = H u X: alike nodes of one rack, each GPU of one signature (a homogeneous
    group) or every node's GPUs of the same signatures in the same numbers (heterogeneous nodes of
    one kind).

    Attributes
    ----------
    gpu_type, gpus_per_node, rack
        What its nodes share: GPU type, GPUs per node (G_g) and rack.
    nodes
        K_w, its nodes' cluster indices.
    shape
        n_s, each slice's GPUs (a slice: a node's GPUs of one signature); a homogeneous pool has
        one slice, every GPU. Which GPUs of a node make each slice: JointCluster.slices_of.
    signatures
        Per slice, the tier of every class in play (JointCluster.classes' order).
    kind
        Its kind, an index into JointCluster.kinds.
    """

    gpu_type: str
    gpus_per_node: int
    rack: str
    nodes: tuple[int, ...]  # cluster indices
    shape: tuple[int, ...]  # GPUs of each slice (one slice if homogeneous)
    signatures: tuple[tuple[float, ...], ...]  # per slice: the tier of every class in play
    kind: int

    @property
    def homogeneous(self) -> bool:
        """Whether every GPU of the pool is alike (one slice): a group of whole nodes."""
        return len(self.shape) == 1

    @property
    def levels(self) -> tuple[int, ...]:
        """L_g: the divisibility chain of single-node sizes (options.chain_levels)."""
        return chain_levels(self.gpus_per_node)

    def worst(self, cls: int) -> float:
        """tau_wa: the worst tier of the pool's GPUs for class index `cls`."""
        return max(sig[cls] for sig in self.signatures)


@dataclass(frozen=True)
class Kind:
    """A kind of node f of F = H u Q (joint.py), what single-node slots are offered on: a homogeneous
    group (a kind alone), or the heterogeneous pools of one GPU type, size and slices, over
    every rack (a job on one node does not care which rack).

    `pools` are its pools (one if homogeneous); the rest as Pool's.
    """

    gpu_type: str
    gpus_per_node: int
    shape: tuple[int, ...]
    signatures: tuple[tuple[float, ...], ...]
    pools: tuple[int, ...]

    @property
    def homogeneous(self) -> bool:
        """Whether its GPUs are all alike: a homogeneous group."""
        return len(self.shape) == 1


@dataclass(frozen=True)
class JointCluster:
    """The round's cluster as the joint model sees it: classes in play, GPU tiers, pools and kinds.

    Attributes
    ----------
    classes
        The variability classes of the round's jobs, sorted: a class index indexes signatures.
    gpu_tier
        (node index, GPU index) -> the GPU's signature, its tier in every class.
    pools
        W: the heterogeneous pools, by their first node, then the homogeneous groups.
    kinds
        F: the heterogeneous kinds, by their first pool, then each homogeneous group alone.
    pool_of
        Node index -> its pool (nodes without GPUs have none).
    slices_of
        Per node index, the GPU indices of each slice of its pool, in the pool's slice order
        (empty for a node without GPUs).
    rack_of
        Each node's rack id ("r0" without a topology).
    cross_rack_scale, rack_scale
        B_ref / B of a spread over racks, and of a spread within each rack, B the bottleneck of
        the links joining the nodes (topology.spread_gbps) and B_ref Topology.node_gbps; at
        least 1 (a faster link does not speed a sync up past its fit).
    across_node_factor
        PAL's flat penalty of a job spanning nodes (Topology.across_node_factor).
    """

    classes: tuple[str, ...]
    gpu_tier: dict[tuple[int, int], tuple[float, ...]]  # (node index, GPU) -> signature
    pools: tuple[Pool, ...]
    kinds: tuple[Kind, ...]
    pool_of: dict[int, int]  # node index -> pool
    slices_of: tuple[tuple[tuple[int, ...], ...], ...]  # node index -> GPU indices of each slice
    rack_of: tuple[str, ...]  # per node index
    cross_rack_scale: float  # B_ref / B of a spread over racks
    rack_scale: dict[str, float]  # B_ref / B of a spread within each rack
    across_node_factor: float


def joint_cluster(cluster: Cluster, classes: tuple[str, ...], tier_tolerance: float) -> JointCluster:
    """The cluster in tiers, pools and kinds for the variability classes in play (sorted).

    Each class's slowdown factors over every GPU are grouped into tiers (`tiers`, at
    Settings.tier_tolerance); a GPU's signature is its tier in every class in play, a node's
    slices its GPUs of each signature. Nodes of one GPU type, size, rack and slices (signatures
    and their GPU counts, wherever on the node) are one pool; the heterogeneous pools of one
    GPU type, size and slices are one kind, a homogeneous group a kind alone. A spread within a
    rack is priced at the bottleneck joining its first two nodes, a spread over racks at the one
    joining the first node of every rack.
    """
    nodes, topo = cluster.nodes, cluster.topology or Topology()
    tier_of = [tiers([n.gpu_slowdown(k, c) for n in nodes for k in range(n.gpus)], tier_tolerance) for c in classes]
    gpu_tier = {(i, k): tuple(tier_of[a][n.gpu_slowdown(k, c)] for a, c in enumerate(classes))
                for i, n in enumerate(nodes) for k in range(n.gpus)}
    rack_by_node = {n: r.id for r in topo.racks for n in r.nodes}
    rack_of = tuple(rack_by_node.get(n.id, "r0") for n in nodes)
    slices_of: list[tuple[tuple[int, ...], ...]] = []
    groups: dict[tuple, list[int]] = {}  # (GPU type, size, rack, signatures, shape) -> nodes
    for i, n in enumerate(nodes):
        sigs = sorted({gpu_tier[i, k] for k in range(n.gpus)})
        slices_of.append(tuple(tuple(k for k in range(n.gpus) if gpu_tier[i, k] == s) for s in sigs))
        if n.gpus:
            groups.setdefault((n.gpu_type, n.gpus, rack_of[i], tuple(sigs), tuple(map(len, slices_of[i]))), []).append(i)
    keys = [key for key in groups if len(key[3]) > 1] + sorted(key for key in groups if len(key[3]) == 1)
    kind_of: dict[tuple, int] = {}  # a heterogeneous pool's key without its rack; a homogeneous group's whole
    pools = []
    for gpu_type, g, rack, sigs, shape in keys:
        kind = kind_of.setdefault((gpu_type, g, sigs, shape) + ((rack,) if len(sigs) == 1 else ()), len(kind_of))
        pools.append(Pool(gpu_type, g, rack, tuple(groups[gpu_type, g, rack, sigs, shape]), shape, sigs, kind))
    members: dict[int, list[int]] = {}
    for p, pool in enumerate(pools):
        members.setdefault(pool.kind, []).append(p)
    kinds = tuple(Kind(pools[ps[0]].gpu_type, pools[ps[0]].gpus_per_node, pools[ps[0]].shape, pools[ps[0]].signatures,
                       tuple(ps)) for _, ps in sorted(members.items()))
    graph = cluster_graph(cluster)
    ref = topo.node_gbps
    by_rack: dict[str, list[str]] = {}
    for i, n in enumerate(nodes):
        by_rack.setdefault(rack_of[i], []).append(n.id)
    rack_scale = {r: ref / min(spread_gbps(cluster, ids[:2], graph), ref) if len(ids) > 1 else 1.0
                  for r, ids in by_rack.items()}
    firsts = [ids[0] for ids in by_rack.values()]
    cross = ref / min(spread_gbps(cluster, firsts, graph), ref) if len(firsts) > 1 else 1.0
    return JointCluster(classes, gpu_tier, tuple(pools), kinds, {k: p for p, pool in enumerate(pools) for k in pool.nodes},
                        tuple(slices_of), rack_of, cross, rack_scale, topo.across_node_factor)


@dataclass(frozen=True)
class Demand:
    """A single-node option kind, D of joint.py: d GPUs of one GPU type on one node, their worst
    tier tau for class `cls` (an index into JointCluster.classes)."""

    cls: int
    gpu_type: str
    gpus: int
    tau: float


@dataclass(frozen=True)
class Slot:
    """A column of y (joint.py): one job of class `cls` on a node of kind `kind`, taking `comp`
    GPUs of each of its slices (a homogeneous group has one slice: a chain size); it serves
    `demand`; `most`, y's upper bound: as many as the kind's nodes hold (joint.py's Variables)."""

    kind: int
    cls: int
    comp: tuple[int, ...]
    demand: int
    most: int

    @property
    def gpus(self) -> int:
        """GPUs the slot takes."""
        return sum(self.comp)


@dataclass(frozen=True)
class Multi:
    """A multi-node definition e of joint.py: whole nodes from the pools E_e (one GPU type and
    size, one rack or any), `nodes` of them, for the options of its `group`; q_en has a column
    for n in `counts`."""

    pools: tuple[int, ...]
    group: int
    counts: tuple[int, ...]
    nodes: int


@dataclass(frozen=True)
class MultiGroup:
    """What a multi option names (M of joint.py): a class, GPU type and size, tier, sync scale
    and scope kind (`spans`: over racks); its definitions are one per rack of that scope kind,
    or the one spanning racks."""

    cls: int
    gpu_type: str
    gpus_per_node: int
    tau: float
    sync_scale: float
    spans: bool
    defs: tuple[int, ...]


@dataclass(frozen=True)
class JointOptions(OptionCounts):
    """Every option of the round (columnar, as formulations.options.OptionSet) and the supply they draw on.

    Arrays are per option c (x's columns), U0 per job.

    Attributes
    ----------
    job, kind
        The option's job index and kind (SINGLE, MULTI or STAY).
    ref
        Its demand in `demands` (single), its group in `groups` (multi), -1 (stay).
    num_nodes, num_gpus
        n_c nodes spanned and a_c GPUs.
    gpu_type, tau, sync_scale
        What the option's value was computed from, so that freezing can revalue it: its GPU
        type, tau_c (its worst tier for the job's class) and B_ref / B_c.
    demands, slots, multi, groups
        D, the y columns (every slot of every pool), the multi-node definitions and M.
    goodput, local_bsz, accum_steps
        g_c at the best batch (M0-equivalent examples per second) and that batch's split.
    speedup, penalized_speedup, utility
        g_c over the job's fair share's goodput; s'_c, that times the restart factor when a
        running job moves; u_c, the p-mean utility of s'_c.
    U0
        Each job's utility when it gets nothing.
    stay_gpus
        Job with a stay option -> node index -> the GPU indices it holds.
    frozen_groups, freeze_penalty
        Set by formulations.freezing: each option's freeze level and accuracy penalty.
    """

    round_input: RoundInput
    cluster: JointCluster
    job: np.ndarray
    kind: np.ndarray
    ref: np.ndarray
    num_nodes: np.ndarray
    num_gpus: np.ndarray
    gpu_type: np.ndarray
    tau: np.ndarray
    sync_scale: np.ndarray
    demands: tuple[Demand, ...]
    slots: tuple[Slot, ...]
    multi: tuple[Multi, ...]
    groups: tuple[MultiGroup, ...]
    goodput: np.ndarray
    speedup: np.ndarray
    penalized_speedup: np.ndarray
    utility: np.ndarray
    local_bsz: np.ndarray
    accum_steps: np.ndarray
    U0: np.ndarray
    stay_gpus: dict[int, dict[int, tuple[int, ...]]]  # job with a stay option -> node -> GPU indices
    frozen_groups: np.ndarray | None = None  # freeze level of each option (formulations.freezing)
    freeze_penalty: np.ndarray | None = None  # accuracy penalty each option spends this round

    def stay_option(self, j: int) -> int:
        """The stay option of job j (a job in `stay_gpus`)."""
        return self._stay_options[j]

    @cached_property
    def _stay_options(self) -> dict[int, int]:
        return stay_options(self.job, self.kind == STAY)

    def revalue(self, which: np.ndarray, compute: np.ndarray, sync: np.ndarray) -> BatchChoice:
        """The best batch of options `which`, their compute and sync times scaled.

        Each option is valued as `_value` values it, its parameters first scaled by
        `compute[i]` and `sync[i]` (e.g. layers frozen: models.freezing.scaled_params).
        """
        nodes = self.num_nodes[which]
        return BatchChoice(*_value(self.round_input.jobs, self.job[which], self.gpu_type[which], nodes,
                                   self.num_gpus[which], self.tau[which], self.sync_scale[which],
                                   np.where(nodes > 1, self.cluster.across_node_factor, 1.0),
                                   (np.asarray(compute, dtype=float), np.asarray(sync, dtype=float))))

    def undominated(self, util: np.ndarray) -> np.ndarray:
        """Mask of the options no option of their job beats with a subset of their resources.

        The options are compared at `util` (their utility, or a freeze level's): see `_undominated`.
        """
        return _undominated(self, util)

    def subset(self, pick: np.ndarray) -> JointOptions:
        """The options `pick` (indices), their stay GPUs with them."""
        kept = set(self.job[pick[self.kind[pick] == STAY]].tolist())
        rows = {name: getattr(self, name)[pick] for name in (
            "job", "kind", "ref", "num_nodes", "num_gpus", "gpu_type", "tau", "sync_scale", "goodput",
            "speedup", "penalized_speedup", "utility", "local_bsz", "accum_steps")}
        return replace(self, **rows, stay_gpus={j: g for j, g in self.stay_gpus.items() if j in kept})


_DEADLINE_EVERY = 4096  # partitions grown between checks of the build's deadline


@cache
def vector_partitions(total: tuple[int, ...]) -> tuple[tuple[tuple[int, ...], ...], ...]:
    """Every multiset of nonzero count vectors summing to `total`, each as its parts in
    non-increasing order: the ways to share a node's GPUs of each slice out among jobs.

    Examples
    --------
    >>> vector_partitions((2, 1))
    (((2, 1),), ((2, 0), (0, 1)), ((1, 1), (1, 0)), ((1, 0), (1, 0), (0, 1)))
    """
    parts = sorted((m for m in itertools.product(*(range(t + 1) for t in total)) if any(m)), reverse=True)
    out: list[tuple[tuple[int, ...], ...]] = []
    steps = itertools.count(1)

    def grow(left: tuple[int, ...], start: int, acc: tuple[tuple[int, ...], ...]) -> None:
        if next(steps) % _DEADLINE_EVERY == 0:  # they grow as Bell numbers: 16 GPUs of 16 tiers, 10^10
            check_build_deadline(f"the ways to share a node of {sum(total)} GPUs in {len(total)} slices of tiers")
        if not any(left):
            out.append(acc)
            return
        for i in range(start, len(parts)):
            if all(a <= b for a, b in zip(parts[i], left)):
                grow(tuple(b - a for a, b in zip(parts[i], left)), i, acc + (parts[i],))

    grow(total, 0, ())
    return tuple(out)


def _supply(cl: JointCluster) -> tuple[tuple[Demand, ...], tuple[Slot, ...]]:
    """D and every slot: for every class in play, every kind of node and composition, the demand
    it serves (its GPU type, size and worst tier for the class)."""
    index: dict[Demand, int] = {}
    slots = []
    for a in range(len(cl.classes)):
        for f, kind in enumerate(cl.kinds):
            nodes = sum(len(cl.pools[p].nodes) for p in kind.pools)
            levels = chain_levels(kind.gpus_per_node) if kind.homogeneous else ()
            for m, tau in _comp_tiers(kind.signatures, kind.shape, levels, a):
                demand = Demand(a, kind.gpu_type, sum(m), tau)
                most = nodes * min(n // k for n, k in zip(kind.shape, m) if k)
                slots.append(Slot(f, a, m, index.setdefault(demand, len(index)), most))
    return tuple(index), tuple(slots)


@cache
def _comp_tiers(signatures: tuple[tuple[float, ...], ...], sizes: tuple[int, ...], levels: tuple[int, ...],
                a: int) -> tuple[tuple[tuple[int, ...], float], ...]:
    """A slot's compositions on a node of these slices (a homogeneous node: its chain `levels`)
    and their worst tier for class a; alike nodes share one."""
    comps = [(d,) for d in levels] if levels else [m for m in itertools.product(*(range(n + 1) for n in sizes)) if sum(m)]
    return tuple((m, max(sig[a] for sig, count in zip(signatures, m) if count)) for m in comps)


def _multis(cl: JointCluster) -> tuple[tuple[Multi, ...], tuple[MultiGroup, ...]]:
    """Every multi-node definition and group (M of joint.py), for every class in play.

    For each GPU type and size, and each tier t of the class, the eligible pools are those whose
    worst GPU is at most t: one definition per rack, and one over all racks if there are several;
    a definition whose nodes a better tier already gave is left out (the same nodes valued worse).
    A rack's definitions join the group of their class, type, size, tier and rack bandwidth scale.
    """
    defs: list[Multi] = []
    group_index: dict[tuple, int] = {}
    for a in range(len(cl.classes)):
        kinds: dict[tuple[str, int], list[int]] = {}
        for p, pool in enumerate(cl.pools):
            kinds.setdefault((pool.gpu_type, pool.gpus_per_node), []).append(p)
        for (gpu_type, g), members in kinds.items():
            seen: set[tuple[int, ...]] = set()
            for t in sorted({cl.pools[p].worst(a) for p in members}):
                eligible = [p for p in members if cl.pools[p].worst(a) <= t]
                by_rack: dict[str, list[int]] = {}
                for p in eligible:
                    by_rack.setdefault(cl.pools[p].rack, []).append(p)
                scopes = [(by_rack[r], cl.rack_scale[r], False) for r in sorted(by_rack)]
                if len(by_rack) > 1:
                    scopes.append((eligible, cl.cross_rack_scale, True))
                for scope, scale, spans in scopes:
                    nodes = sum(len(cl.pools[p].nodes) for p in scope)
                    counts = multi_node_counts(nodes)
                    if tuple(scope) in seen or not counts:
                        continue
                    seen.add(tuple(scope))
                    group = group_index.setdefault((a, gpu_type, g, t, scale, spans), len(group_index))
                    defs.append(Multi(tuple(scope), group, tuple(counts), nodes))
    members_of: dict[int, list[int]] = {}
    for e, d in enumerate(defs):
        members_of.setdefault(d.group, []).append(e)
    groups = tuple(MultiGroup(a, gpu_type, g, t, scale, spans, tuple(members_of[i]))
                   for (a, gpu_type, g, t, scale, spans), i in group_index.items())
    return tuple(defs), groups


def _class_templates(cl: JointCluster, a: int, demands: tuple[Demand, ...],
                     groups: tuple[MultiGroup, ...], defs: tuple[Multi, ...]) -> dict[str, np.ndarray]:
    """Every option of a job of class a, before its GPU types and bounds filter them: one single
    option per demand of the class, one multi option per group of the class and node count."""
    rows = _Rows()
    for e, demand in enumerate(demands):
        if demand.cls == a:
            rows.add(SINGLE, e, 1, demand.gpus, demand.tau, 1.0, demand.gpu_type)
    for i, group in enumerate(groups):
        if group.cls == a:
            for n in sorted({n for d in group.defs for n in defs[d].counts}):
                rows.add(MULTI, i, n, n * group.gpus_per_node, group.tau, group.sync_scale, group.gpu_type)
    return rows.arrays()


@dataclass
class _Rows:
    """Options as rows before valuation; `ref` is the demand (single) or group (multi)."""

    kind: list[int] = field(default_factory=list)
    ref: list[int] = field(default_factory=list)
    nodes: list[int] = field(default_factory=list)
    gpus: list[int] = field(default_factory=list)
    tau: list[float] = field(default_factory=list)
    sync_scale: list[float] = field(default_factory=list)
    gpu_type: list[str] = field(default_factory=list)

    def add(self, kind: int, ref: int, nodes: int, gpus: int, tau: float, sync_scale: float, gpu_type: str) -> None:
        """Append one option's row."""
        for name, value in zip(("kind", "ref", "nodes", "gpus", "tau", "sync_scale", "gpu_type"),
                               (kind, ref, nodes, gpus, tau, sync_scale, gpu_type)):
            getattr(self, name).append(value)

    def arrays(self) -> dict[str, np.ndarray]:
        """Every field as an array, by field name."""
        return {k: np.asarray(v) for k, v in self.__dict__.items()}


def _stay(job: JobSpec, cl: JointCluster, cluster: Cluster) -> tuple[dict, float, float, int]:
    """Node -> GPU indices a running job holds, its worst tier, sync scale and nodes spanned."""
    held = cluster.layout(job.current_gpus).per_node
    a = cl.classes.index(job.variability_class)
    tau = max(cl.gpu_tier[k, i][a] for k, gs in held.items() for i in gs)
    racks = {cl.rack_of[k] for k in held}
    scale = 1.0 if len(held) == 1 else cl.cross_rack_scale if len(racks) > 1 else cl.rack_scale[next(iter(racks))]
    return {k: tuple(sorted(gs)) for k, gs in held.items()}, tau, scale, len(held)


def _value(jobs: tuple[JobSpec, ...], job: np.ndarray, gpu_type: np.ndarray, nodes: np.ndarray, gpus: np.ndarray,
           tau: np.ndarray, sync: np.ndarray, spread: np.ndarray, frozen: tuple[np.ndarray, np.ndarray] | None = None,
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Best batch of every row in one vectorized call: goodput, local batch and accumulation steps.

    Rows of one model (the jobs of one application on one GPU type: options.model_key) at one
    size, tier, sync scale, spread factor and, with `frozen` = (c, s) per row, freeze scales
    share a shape, whose batch grid and throughput are computed once
    (models.efficiency.best_batch_shared), the parameters scaled as joint.py's docstring says
    (first by c and s, as scaled_params); each row's gradient statistics value it.
    """
    types, type_of = distinct_values(gpu_type)
    models, model = model_index(jobs, types.tolist(), job, type_of)
    fixed = np.array([key[2] for key in models], dtype=float)[model]
    # a shape: one model (the jobs of one application on one GPU type) at one size and scaling
    shapes, shape = distinct_rows([model, nodes, gpus] + [dense_ids(col) for col in (tau, sync, spread) + (frozen or ())])
    m = model[shapes]
    params = ThroughputParams(*model_table(models, 0, ThroughputParams)[m].T)
    if frozen is not None:
        params = scaled_params(params, frozen[0][shapes], frozen[1][shapes])
    P = np.array(field_values(params)).T
    P *= np.column_stack([tau, tau, sync, sync, np.ones((len(job), 3))])[shapes]
    P[:, :6] *= spread[shapes, None]
    grad = np.array([field_values(s.grad_stats) for s in jobs]).reshape(-1, 2)[job]
    choice = best_batch_shared(ThroughputParams(*P.T), BatchLimits(*model_table(models, 1, BatchLimits)[m].T),
                               nodes[shapes], gpus[shapes], fixed[shapes], GradStats(*grad.T), shape)
    return choice.goodput, choice.local_bsz, choice.accum_steps


def _fair_rows(ri: RoundInput) -> dict[str, np.ndarray]:
    """Each job's fair share (options.fair_shapes, goodput's) as a row valued on typical GPUs in one rack."""
    groups = node_groups(ri)
    j, g, n, r = fair_shapes(ri, groups)
    t = np.array([grp.gpu_type for grp in groups], dtype=str)[g] if len(g) else np.zeros(0, str)
    return {"job": j.astype(int), "gpu_type": t, "nodes": n.astype(int), "gpus": r.astype(int),
            "tau": np.ones(len(j)), "sync_scale": np.ones(len(j)), "spread": np.ones(len(j))}


def _smaller(cl: JointCluster) -> dict[tuple[str, int], tuple[int, ...]]:
    """(GPU type, d) -> the sizes d' < d a d-GPU single option may shrink to wherever it can be
    placed: any on a heterogeneous node; on a homogeneous pool only its chain sizes."""
    out: dict[tuple[str, int], tuple[int, ...]] = {}
    for gpu_type in {pool.gpu_type for pool in cl.pools}:
        mine = [pool for pool in cl.pools if pool.gpu_type == gpu_type]
        for d in range(2, max(pool.gpus_per_node for pool in mine) + 1):
            allowed = set(range(1, d))
            for pool in mine:
                if pool.homogeneous and d in pool.levels:
                    allowed &= set(pool.levels)
            out[gpu_type, d] = tuple(sorted(allowed))
    return out


def _undominated(o: JointOptions, util: np.ndarray) -> np.ndarray:
    """Mask of the options that no other option of the same job beats with a subset of its resources.

    Any d' of a single option's d GPUs (d' a size it may shrink to, `_smaller`) are a placement
    of d' GPUs at a tier no worse than its tier t, worth at least any single option of d' GPUs
    of that GPU type at a tier t' >= t: where one is worth as much, the option is dominated. So
    is a multi option of tier t whose nodes' GPU count G is worth no more than a single option
    of G GPUs at a tier t' >= t (one of its whole nodes), and of one multi-node group a larger
    node count must be worth more (prune_dominated).
    """
    keep = np.ones(o.num_options, dtype=bool)
    multi = np.flatnonzero(o.kind == MULTI)
    keep[multi] = prune_dominated(o.job[multi], o.ref[multi], o.num_gpus[multi], util[multi])
    single = np.flatnonzero(o.kind == SINGLE)
    if not len(single):
        return keep
    types, type_of = distinct_values(o.gpu_type[single])
    taus, tier_of = np.unique(o.tau[single], return_inverse=True)
    types, tier_of = types.tolist(), tier_of.ravel()
    d = o.num_gpus[single]
    value = np.full((o.num_jobs, len(types), len(taus), int(d.max()) + 1), -np.inf)
    value[o.job[single], type_of, tier_of, d] = util[single]
    # at_least[j, y, i, d']: the best single option of d' GPUs at a tier no better than taus[i]
    at_least = np.maximum.accumulate(value[:, :, ::-1], axis=2)[:, :, ::-1]
    beaten = np.zeros(value.shape, dtype=bool)
    for (gpu_type, size), smaller in _smaller(o.cluster).items():
        if gpu_type in types and size < value.shape[3] and smaller:
            y = types.index(gpu_type)
            beaten[:, y, :, size] = (at_least[:, y][:, :, list(smaller)] >= value[:, y, :, size, None]).any(axis=2)
    keep[single] = ~beaten[o.job[single], type_of, tier_of, d]
    g = o.num_gpus[multi] // o.num_nodes[multi]
    ok = np.isin(o.gpu_type[multi], types) & (g < value.shape[3])
    if ok.any():
        m = multi[ok]
        tier = np.minimum(np.searchsorted(taus, o.tau[m]), len(taus) - 1)  # the first tier >= the option's
        whole = at_least[o.job[m], np.searchsorted(types, o.gpu_type[m]), tier, g[ok]]
        whole = np.where(taus[tier] >= o.tau[m], whole, -np.inf)
        keep[m] &= ~(whole >= util[m])
    return keep


@dataclass(frozen=True)
class _Catalog:
    """What every job's options are drawn from, which the cluster and the classes in play alone
    decide: the cluster in tiers and pools, D and the slots, the multi-node definitions and
    groups, the GPU types (sorted), and each class's option templates (`_class_templates`, with
    each option's index into `types` as type_code)."""

    cluster: JointCluster
    demands: tuple[Demand, ...]
    slots: tuple[Slot, ...]
    multi: tuple[Multi, ...]
    groups: tuple[MultiGroup, ...]
    types: tuple[str, ...]
    templates: tuple[dict[str, np.ndarray], ...]


def _catalog(ri: RoundInput) -> _Catalog:
    """The round's catalog, made once per cluster, classes in play and tier tolerance
    (Cluster.derive: a replay's rounds share their cluster)."""
    classes = tuple(sorted({job.variability_class for job in ri.jobs}))
    tolerance = ri.settings.tier_tolerance
    return ri.cluster.derive(("formulations.joint_options: catalog", classes, tolerance),
                             lambda: _make_catalog(joint_cluster(ri.cluster, classes, tolerance)))


def _make_catalog(cl: JointCluster) -> _Catalog:
    demands, slots = _supply(cl)
    defs, groups = _multis(cl)
    types = tuple(sorted({pool.gpu_type for pool in cl.pools}))
    templates = tuple(_class_templates(cl, a, demands, groups, defs) for a in range(len(cl.classes)))
    for T in templates:
        T["type_code"] = np.searchsorted(types, T["gpu_type"]) if len(T["gpu_type"]) else np.zeros(0, int)
    return _Catalog(cl, demands, slots, defs, groups, types, templates)


def enumerate_joint_options(ri: RoundInput, prune: bool = True) -> JointOptions:
    """Every job's options (C_j of joint.py's docstring), valued and pruned.

    A job gets the single and multi options of its class whose GPUs lie within its
    [min_gpus, max_gpus] on GPU types it has a model for (fitted or projected), valued at its
    batch limits on each type (JobSpec.batch_on), and a running job whose GPUs are within those
    limits a stay option; a pinned job gets its stay option only. All are valued at their best batch together with the
    jobs' fair shares in one vectorized call; the speedup is the goodput over the fair share's
    (its best option's where the fair share has none), penalized by the restart factor when a
    running job moves. Options without goodput or penalized speedup are dropped.

    Parameters
    ----------
    ri
        The round.
    prune
        Whether to drop the dominated options (`_undominated`); False keeps them, for freezing
        to fold its levels in before pruning.
    """
    jobs, settings = ri.jobs, ri.settings
    catalog = _catalog(ri)
    cl, demands, slots, defs, groups = catalog.cluster, catalog.demands, catalog.slots, catalog.multi, catalog.groups
    types, templates = catalog.types, catalog.templates
    types_ok = np.array([[t in job.throughput for t in types] for job in jobs], dtype=bool).reshape(len(jobs), len(types))
    class_of = np.array([cl.classes.index(job.variability_class) for job in jobs], dtype=int)
    min_gpus, max_gpus = (np.array([getattr(job, k) for job in jobs], dtype=int) for k in ("min_gpus", "max_gpus"))
    pinned = np.array([job.pinned for job in jobs], dtype=bool)
    parts: list[dict[str, np.ndarray]] = []
    for a, T in enumerate(templates):  # every job of a class against its class's templates at once
        js = np.flatnonzero(class_of == a)
        ok = ((T["gpus"] >= min_gpus[js, None]) & (T["gpus"] <= max_gpus[js, None]) & ~pinned[js, None]  # a pinned job only stays
              & types_ok[js][:, T["type_code"]])
        at_job, at_template = np.nonzero(ok)
        parts.append({k: v[at_template] for k, v in T.items()} | {"job": js[at_job]})
    if parts:  # job by job, each job's options as its templates list them
        order = np.argsort(np.concatenate([part["job"] for part in parts]), kind="stable")
        parts = [{k: np.concatenate([part[k] for part in parts])[order] for k in parts[0]}]
    stays = _Rows()
    stay_job, stay_gpus = [], {}
    for j, job in enumerate(jobs):
        if job.running and job.min_gpus <= len(job.current_gpus) <= job.max_gpus:
            held, tau, scale, n = _stay(job, cl, ri.cluster)
            gpu_type = ri.cluster.nodes[next(iter(held))].gpu_type
            if gpu_type in job.throughput:
                stay_gpus[j] = held
                stay_job.append(j)
                stays.add(STAY, -1, n, len(job.current_gpus), tau, scale, gpu_type)
    parts.append(stays.arrays() | {"job": np.asarray(stay_job, dtype=int)})
    o = {k: np.concatenate([part[k] for part in parts if len(part["job"])] or [np.zeros(0)]) for k in parts[-1]}
    for k in ("job", "kind", "ref", "nodes", "gpus"):
        o[k] = o[k].astype(int)
    job_arr, kind = o["job"], o["kind"]
    # the options and the fair shares in one vectorized valuation
    fair_rows = _fair_rows(ri)
    spread = np.where(o["nodes"] > 1, cl.across_node_factor, 1.0)
    rows = {k: np.concatenate([np.asarray(o[k] if k in o else spread), fair_rows[k]]) for k in fair_rows}
    value, local, accum = _value(jobs, rows["job"], rows["gpu_type"], rows["nodes"], rows["gpus"],
                                 rows["tau"].astype(float), rows["sync_scale"].astype(float), rows["spread"])
    n = len(job_arr)
    goodput, local, accum = value[:n], local[:n], accum[:n]
    fair = np.zeros(len(jobs))
    fair[fair_rows["job"]] = value[n:]
    best = np.zeros(len(jobs))
    np.maximum.at(best, job_arr, goodput)
    fair = np.where(fair > 0, fair, best)
    speedup = np.divide(goodput, fair[job_arr], out=np.zeros_like(goodput), where=fair[job_arr] > 0)
    factor, running = restart_factors(jobs, settings)
    moves = (kind != STAY) & running[job_arr]
    penalized = np.where(moves, speedup * factor[job_arr] if len(job_arr) else speedup, speedup)
    keep = (goodput > 0) & (penalized > 0)
    U0 = unallocated_utilities(job_arr, speedup, keep, len(jobs), settings)
    pick = np.flatnonzero(keep)
    kept_stays = set(job_arr[pick[kind[pick] == STAY]].tolist())
    opts = JointOptions(
        round_input=ri, cluster=cl, job=job_arr[pick], kind=kind[pick], ref=o["ref"][pick],
        num_nodes=o["nodes"][pick], num_gpus=o["gpus"][pick], gpu_type=o["gpu_type"][pick],
        tau=o["tau"][pick].astype(float), sync_scale=o["sync_scale"][pick].astype(float),
        demands=demands, slots=slots, multi=defs, groups=groups, goodput=goodput[pick], speedup=speedup[pick],
        penalized_speedup=penalized[pick], utility=utility(penalized[pick], settings.p), local_bsz=local[pick],
        accum_steps=accum[pick], U0=U0, stay_gpus={j: held for j, held in stay_gpus.items() if j in kept_stays},
    )
    return opts.subset(np.flatnonzero(opts.undominated(opts.utility))) if prune else opts
