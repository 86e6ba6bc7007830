"""The joint round's options (C_j of joint.py's docstring): pools, tiers, compositions, values.

The cluster as the joint model sees it (`joint_cluster`): each class's GPU slowdown factors
grouped into tiers (`tiers`), nodes into pools (a homogeneous group of alike nodes, or one
heterogeneous node and its slices) and the bandwidth scale of a spread within a rack and across
racks. Every job's options (`enumerate_joint_options`): single, comp, multi and stay, as
joint.py's docstring defines them, valued at their best batch in one vectorized call with the
jobs' fair shares (`_value`), then pruned of the dominated ones (`_undominated`). The options
are columnar (`JointOptions`, as options.OptionSet), so formulations.freezing folds freeze
levels into them as it does for goodput's.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np

from schedlab.formulations.options import (
    OptionCounts,
    chain_levels,
    fair_shapes,
    field_values,
    multi_node_counts,
    node_groups,
    prune_dominated,
    restart_factor,
    stay_options,
    unallocated_utilities,
    utility,
)
from schedlab.models.efficiency import BatchChoice, best_batch
from schedlab.models.freezing import scaled_params
from schedlab.state import BatchLimits, GradStats, JobSpec, RoundInput, ThroughputParams, Topology
from schedlab.topology import cluster_graph, spread_gbps

__all__ = ["COMP", "MULTI", "SINGLE", "STAY", "JointCluster", "JointOptions", "Multi", "Pool", "compositions",
           "enumerate_joint_options", "joint_cluster", "tiers"]

SINGLE, COMP, MULTI, STAY = 0, 1, 2, 3  # the kinds of option of joint.py's C_j


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
    """A pool w of W = H u X: a homogeneous group of alike nodes, or one heterogeneous node.

    Attributes
    ----------
    gpu_type, gpus_per_node, rack
        What its nodes share: GPU type, GPUs per node (G_g) and rack.
    nodes
        K_w, its nodes' cluster indices (one for a heterogeneous node).
    slices
        Sl_k, the GPU indices of each signature; a homogeneous pool has one slice, every GPU.
    signatures
        Per slice, the tier of every class in play (JointCluster.classes' order).
    """

    gpu_type: str
    gpus_per_node: int
    rack: str
    nodes: tuple[int, ...]  # cluster indices
    slices: tuple[tuple[int, ...], ...]  # GPU indices of each signature (one slice if homogeneous)
    signatures: tuple[tuple[float, ...], ...]  # per slice: the tier of every class in play

    @property
    def homogeneous(self) -> bool:
        """Whether every GPU of the pool is alike (one slice): a group of whole nodes."""
        return len(self.slices) == 1

    @property
    def levels(self) -> tuple[int, ...]:
        """L_g: the divisibility chain of single-node sizes (options.chain_levels)."""
        return chain_levels(self.gpus_per_node)

    def worst(self, cls: int) -> float:
        """tau_wa: the worst tier of the pool's GPUs for class index `cls`."""
        return max(sig[cls] for sig in self.signatures)


@dataclass(frozen=True)
class JointCluster:
    """The round's cluster as the joint model sees it: classes in play, GPU tiers and pools.

    Attributes
    ----------
    classes
        The variability classes of the round's jobs, sorted: a class index indexes signatures.
    gpu_tier
        (node index, GPU index) -> the GPU's signature, its tier in every class.
    pools
        W: every heterogeneous node alone, in node order, then the homogeneous groups.
    pool_of
        Node index -> its pool (nodes without GPUs have none).
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
    pool_of: dict[int, int]  # node index -> pool
    rack_of: tuple[str, ...]  # per node index
    cross_rack_scale: float  # B_ref / B of a spread over racks
    rack_scale: dict[str, float]  # B_ref / B of a spread within each rack
    across_node_factor: float


def joint_cluster(ri: RoundInput) -> JointCluster:
    """The round's cluster in tiers and pools.

    Each class's slowdown factors over every GPU are grouped into tiers (`tiers`, at
    Settings.tier_tolerance); a GPU's signature is its tier in every class in play. Alike nodes
    of one GPU type, size, rack and signature are one pool; a node whose GPUs differ is a pool
    alone, one slice per signature. A spread within a rack is priced at the bottleneck joining
    its first two nodes, a spread over racks at the one joining the first node of every rack.
    """
    nodes, topo = ri.cluster.nodes, ri.cluster.topology or Topology()
    classes = tuple(sorted({job.variability_class for job in ri.jobs}))
    tier_of = [tiers([n.gpu_slowdown(k, c) for n in nodes for k in range(n.gpus)], ri.settings.tier_tolerance)
               for c in classes]
    gpu_tier = {(i, k): tuple(tier_of[a][n.gpu_slowdown(k, c)] for a, c in enumerate(classes))
                for i, n in enumerate(nodes) for k in range(n.gpus)}
    rack_by_node = {n: r.id for r in topo.racks for n in r.nodes}
    rack_of = tuple(rack_by_node.get(n.id, "r0") for n in nodes)
    groups: dict[tuple, list[int]] = {}
    pools: list[Pool] = []
    for i, n in enumerate(nodes):
        if n.gpus == 0:
            continue
        sigs = sorted({gpu_tier[i, k] for k in range(n.gpus)})
        slices = tuple(tuple(k for k in range(n.gpus) if gpu_tier[i, k] == s) for s in sigs)
        if len(sigs) == 1:
            groups.setdefault((n.gpu_type, n.gpus, rack_of[i], sigs[0]), []).append(i)
        else:
            pools.append(Pool(n.gpu_type, n.gpus, rack_of[i], (i,), slices, tuple(sigs)))
    for (gpu_type, g, rack, sig), members in sorted(groups.items()):
        pools.append(Pool(gpu_type, g, rack, tuple(members), (tuple(range(g)),), (sig,)))
    graph = cluster_graph(ri.cluster)
    ref = topo.node_gbps
    by_rack: dict[str, list[str]] = {}
    for i, n in enumerate(nodes):
        by_rack.setdefault(rack_of[i], []).append(n.id)
    rack_scale = {r: ref / min(spread_gbps(ri.cluster, ids[:2], graph), ref) if len(ids) > 1 else 1.0
                  for r, ids in by_rack.items()}
    firsts = [ids[0] for ids in by_rack.values()]
    cross = ref / min(spread_gbps(ri.cluster, firsts, graph), ref) if len(firsts) > 1 else 1.0
    return JointCluster(classes, gpu_tier, tuple(pools), {k: p for p, pool in enumerate(pools) for k in pool.nodes},
                   rack_of, cross, rack_scale, topo.across_node_factor)


@dataclass(frozen=True)
class Multi:
    """A multi-node option's definition: its eligible pools E_c (whole nodes of one GPU type and size)."""

    pools: tuple[int, ...]


@dataclass(frozen=True)
class JointOptions(OptionCounts):
    """Every option of the round (columnar, as formulations.options.OptionSet) and its structure.

    Arrays are per option c (x's columns), U0 per job.

    Attributes
    ----------
    job, kind
        The option's job index and kind (SINGLE, COMP, MULTI or STAY).
    pool
        Its pool (single, comp), its definition in `multi` (multi), -1 (stay).
    num_nodes, num_gpus
        n_c nodes spanned and a_c GPUs.
    comp_id
        Index into compositions[pool[c]] for a composition, -1 otherwise.
    gpu_type, tau, sync_scale
        What the option's value was computed from, so that freezing can revalue it: its GPU
        type, tau_c (its worst tier for the job's class) and B_ref / B_c.
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
    pool: np.ndarray
    num_nodes: np.ndarray
    num_gpus: np.ndarray
    comp_id: np.ndarray
    gpu_type: np.ndarray
    tau: np.ndarray
    sync_scale: np.ndarray
    compositions: dict[int, list[tuple[int, ...]]]  # heterogeneous pool -> its compositions
    multi: tuple[Multi, ...]  # indexed by pool[c] of multi options
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

    def comp(self, c: int) -> tuple[int, ...]:
        """Option c's GPUs per slice of its heterogeneous node (() for other kinds)."""
        return self.compositions[self.pool[c]][self.comp_id[c]] if self.kind[c] == COMP else ()

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
            "job", "kind", "pool", "num_nodes", "num_gpus", "comp_id", "gpu_type", "tau", "sync_scale", "goodput",
            "speedup", "penalized_speedup", "utility", "local_bsz", "accum_steps")}
        return replace(self, **rows, stay_gpus={j: g for j, g in self.stay_gpus.items() if j in kept})


def compositions(pool: Pool) -> list[tuple[int, ...]]:
    """Every count vector m over a heterogeneous node's slices, m_s in 0..n_ks, with a total >= 1.

    Any total is allowed: the node is its own bin, so no size chain is needed, and 3 fast GPUs
    beside a slow one make a 3-GPU job.
    """
    return [m for m in itertools.product(*(range(len(s) + 1) for s in pool.slices)) if sum(m)]


@dataclass
class _Rows:
    """Options as rows before valuation; `pool` is the pool (single, comp) or definition (multi)."""

    kind: list[int] = field(default_factory=list)
    pool: list[int] = field(default_factory=list)
    nodes: list[int] = field(default_factory=list)
    gpus: list[int] = field(default_factory=list)
    tau: list[float] = field(default_factory=list)
    sync_scale: list[float] = field(default_factory=list)
    gpu_type: list[str] = field(default_factory=list)
    comp: list[int] = field(default_factory=list)  # index into the pool's compositions (-1: none)

    def add(self, kind: int, pool: int, nodes: int, gpus: int, tau: float, sync_scale: float, gpu_type: str,
            comp: int = -1) -> None:
        """Append one option's row."""
        for name, value in zip(("kind", "pool", "nodes", "gpus", "tau", "sync_scale", "gpu_type", "comp"),
                               (kind, pool, nodes, gpus, tau, sync_scale, gpu_type, comp)):
            getattr(self, name).append(value)

    def arrays(self) -> dict[str, np.ndarray]:
        """Every field as an array, by field name."""
        return {k: np.asarray(v) for k, v in self.__dict__.items()}


def _class_templates(cl: JointCluster, a: int, comps: dict[int, list], multis: list[Multi]) -> dict[str, np.ndarray]:
    """Every option of a job of class a, before its GPU types and bounds filter them."""
    rows = _Rows()
    kinds: dict[tuple[str, int], list[int]] = {}
    for p, pool in enumerate(cl.pools):
        kinds.setdefault((pool.gpu_type, pool.gpus_per_node), []).append(p)
        if pool.homogeneous:
            for d in pool.levels:
                rows.add(SINGLE, p, 1, d, pool.signatures[0][a], 1.0, pool.gpu_type)
            continue
        for i, m in enumerate(comps[p]):
            tau = max(sig[a] for sig, count in zip(pool.signatures, m) if count)
            rows.add(COMP, p, 1, sum(m), tau, 1.0, pool.gpu_type, i)
    for (gpu_type, g), members in kinds.items():
        seen: set[tuple[int, ...]] = set()
        for t in sorted({cl.pools[p].worst(a) for p in members}):
            eligible = [p for p in members if cl.pools[p].worst(a) <= t]
            racks = sorted({cl.pools[p].rack for p in eligible})
            scopes = [([p for p in eligible if cl.pools[p].rack == r], cl.rack_scale[r]) for r in racks]
            if len(racks) > 1:
                scopes.append((eligible, cl.cross_rack_scale))
            for scope, scale in scopes:
                counts = multi_node_counts(sum(len(cl.pools[p].nodes) for p in scope))
                if tuple(scope) in seen or not counts:  # the same nodes at a worse tier: dominated
                    continue
                seen.add(tuple(scope))
                for n in counts:
                    rows.add(MULTI, len(multis), n, n * g, t, scale, gpu_type)
                multis.append(Multi(tuple(scope)))
    return rows.arrays()


def _stay(job: JobSpec, cl: JointCluster, node_index: dict[str, int]) -> tuple[dict, float, float, int]:
    """Node -> GPU indices a running job holds, its worst tier, sync scale and nodes spanned."""
    held: dict[int, list[int]] = {}
    for ref in job.current_gpus:
        held.setdefault(node_index[ref.node], []).append(ref.gpu)
    a = cl.classes.index(job.variability_class)
    tau = max(cl.gpu_tier[k, i][a] for k, gs in held.items() for i in gs)
    racks = {cl.rack_of[k] for k in held}
    scale = 1.0 if len(held) == 1 else cl.cross_rack_scale if len(racks) > 1 else cl.rack_scale[next(iter(racks))]
    return {k: tuple(sorted(gs)) for k, gs in held.items()}, tau, scale, len(held)


def _value(jobs: tuple[JobSpec, ...], job: np.ndarray, gpu_type: np.ndarray, nodes: np.ndarray, gpus: np.ndarray,
           tau: np.ndarray, sync: np.ndarray, spread: np.ndarray, frozen: tuple[np.ndarray, np.ndarray] | None = None,
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Best batch of every row in one vectorized call: goodput, local batch and accumulation steps.

    Each distinct (job, GPU type, shape, tier, sync scale, spread factor and, with `frozen` =
    (c, s) per row, freeze scales) is valued once, with the parameters scaled as joint.py's
    docstring says (first by c and s, as scaled_params).
    """
    types = sorted(set(gpu_type.tolist()))
    type_index = np.searchsorted(types, gpu_type)
    columns = (job, type_index, nodes, gpus, tau, sync, spread) + (frozen or ())
    codes = [np.unique(col, return_inverse=True) for col in columns]
    key = np.zeros(len(job), dtype=np.int64)
    for values, code in codes:  # one mixed-radix integer per row: a 1-D unique is much faster than axis=0
        key = key * len(values) + code.ravel()
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    uj, ut, un, ur = job[first].astype(int), type_index[first], nodes[first].astype(int), gpus[first].astype(int)
    utau, usync, uspread = tau[first], sync[first], spread[first]
    table = np.zeros((len(jobs), len(types), 7))
    for j, spec in enumerate(jobs):
        for t, name in enumerate(types):
            if name in spec.throughput:
                table[j, t] = field_values(spec.throughput[name])
    params = table[uj, ut]
    if frozen is not None:
        params = np.array(field_values(scaled_params(ThroughputParams(*params.T), frozen[0][first], frozen[1][first]))).T
    params *= np.column_stack([utau, utau, usync, usync, np.ones((len(uj), 3))])
    params[:, :6] *= uspread[:, None]
    grad = np.array([field_values(s.grad_stats) for s in jobs]).reshape(-1, 2)[uj]
    batch = np.array([field_values(s.batch) for s in jobs]).reshape(-1, 4)[uj]
    fixed = np.array([s.fixed_bsz or 0 for s in jobs])[uj]
    choice = best_batch(ThroughputParams(*params.T), GradStats(*grad.T), BatchLimits(*batch.T.astype(int)),
                        un, ur, fixed)
    inverse = inverse.ravel()
    return choice.goodput[inverse], choice.local_bsz[inverse], choice.accum_steps[inverse]


def _fair_rows(ri: RoundInput) -> dict[str, np.ndarray]:
    """Each job's fair share (options.fair_shapes, goodput's) as a row valued on typical GPUs in one rack."""
    groups = node_groups(ri)
    j, g, n, r = fair_shapes(ri, groups)
    t = np.array([grp.gpu_type for grp in groups], dtype=str)[g] if len(g) else np.zeros(0, str)
    return {"job": j.astype(int), "gpu_type": t, "nodes": n.astype(int), "gpus": r.astype(int),
            "tau": np.ones(len(j)), "sync_scale": np.ones(len(j)), "spread": np.ones(len(j))}


def _undominated(o: JointOptions, util: np.ndarray) -> np.ndarray:
    """Mask of the options that no other option of the same job beats with a subset of its resources.

    Within a pool or multi-node definition a larger shape must be worth more (prune_dominated);
    on a heterogeneous node a composition must be worth more than every one it contains.
    """
    kind, pool, job = o.kind, o.pool, o.job
    key = np.where(kind == SINGLE, pool, np.where(kind == MULTI, pool + 1 + pool.max(initial=0), -1))
    keep = prune_dominated(job, key, o.num_gpus, util)
    for p, comp_list in o.compositions.items():
        mine = np.flatnonzero((kind == COMP) & (pool == p))
        if not len(mine):
            continue
        M = np.array(comp_list)
        contains = (M[:, None, :] <= M[None, :, :]).all(axis=2) & ~np.eye(len(M), dtype=bool)  # [i', i]: i' in i
        value = np.full((o.num_jobs, len(M)), -np.inf)
        value[job[mine], o.comp_id[mine]] = util[mine]
        beaten = np.asarray(((value[:, :, None] >= value[:, None, :]) & contains[None]).any(axis=1))
        keep[mine] &= ~beaten[job[mine], o.comp_id[mine]]
    return keep


def enumerate_joint_options(ri: RoundInput, prune: bool = True) -> JointOptions:
    """Every job's options (C_j of joint.py's docstring), valued and pruned.

    A job gets the single, comp and multi options of its class whose GPUs lie within its
    [min_gpus, max_gpus] on GPU types it has a model for, and a running job whose GPUs are
    within those limits a stay option. All are valued at their best batch together with the
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
    cl = joint_cluster(ri)
    node_index = ri.cluster.node_index
    comps = {p: compositions(pool) for p, pool in enumerate(cl.pools) if not pool.homogeneous}
    multis: list[Multi] = []
    types = sorted({pool.gpu_type for pool in cl.pools})
    templates = [_class_templates(cl, a, comps, multis) for a in range(len(cl.classes))]
    for T in templates:
        T["type_code"] = np.searchsorted(types, T["gpu_type"]) if len(T["gpu_type"]) else np.zeros(0, int)
    types_ok = np.array([[t in job.throughput for t in types] for job in jobs], dtype=bool).reshape(len(jobs), -1)
    parts: list[dict[str, np.ndarray]] = []
    stays = _Rows()
    stay_job, stay_gpus = [], {}
    for j, job in enumerate(jobs):
        T = templates[cl.classes.index(job.variability_class)]
        ok = (T["gpus"] >= job.min_gpus) & (T["gpus"] <= job.max_gpus)
        if not types_ok[j].all():
            ok &= types_ok[j][T["type_code"]]
        parts.append({k: v[ok] for k, v in T.items()} | {"job": np.full(int(ok.sum()), j)})
        if job.running and job.min_gpus <= len(job.current_gpus) <= job.max_gpus:
            held, tau, scale, n = _stay(job, cl, node_index)
            gpu_type = ri.cluster.nodes[next(iter(held))].gpu_type
            if gpu_type in job.throughput:
                stay_gpus[j] = held
                stay_job.append(j)
                stays.add(STAY, -1, n, len(job.current_gpus), tau, scale, gpu_type)
    parts.append(stays.arrays() | {"job": np.asarray(stay_job, dtype=int)})
    o = {k: np.concatenate([part[k] for part in parts if len(part["job"])] or [np.zeros(0)]) for k in parts[-1]}
    o["job"], o["kind"], o["pool"] = o["job"].astype(int), o["kind"].astype(int), o["pool"].astype(int)
    o["nodes"], o["gpus"], o["comp"] = o["nodes"].astype(int), o["gpus"].astype(int), o["comp"].astype(int)
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
    factor = np.array([restart_factor(job, settings) if job.running else 1.0 for job in jobs])
    moves = (kind != STAY) & np.array([job.running for job in jobs], dtype=bool)[job_arr]
    penalized = np.where(moves, speedup * factor[job_arr] if len(job_arr) else speedup, speedup)
    keep = (goodput > 0) & (penalized > 0)
    U0 = unallocated_utilities(job_arr, speedup, keep, len(jobs), settings)
    pick = np.flatnonzero(keep)
    opts = JointOptions(
        round_input=ri, cluster=cl, job=job_arr[pick], kind=kind[pick], pool=o["pool"][pick],
        num_nodes=o["nodes"][pick], num_gpus=o["gpus"][pick], comp_id=o["comp"][pick],
        gpu_type=o["gpu_type"][pick], tau=o["tau"][pick].astype(float), sync_scale=o["sync_scale"][pick].astype(float),
        compositions=comps, multi=tuple(multis), goodput=goodput[pick], speedup=speedup[pick],
        penalized_speedup=penalized[pick], utility=utility(penalized[pick], settings.p), local_bsz=local[pick],
        accum_steps=accum[pick], U0=U0, stay_gpus=stay_gpus,
    ).subset(np.arange(len(pick)))
    return opts.subset(np.flatnonzero(opts.undominated(opts.utility))) if prune else opts

