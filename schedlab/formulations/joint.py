r"""The joint round: Pollux's goodput with every GPU's variability tier and the topology's spread.

Follows goodput.py (Pollux's goodput and p-mean fairness as Sia's configuration MILP) and PAL
(Jain et al. SC'24: a data-parallel job runs at the speed of its slowest GPU, per-GPU slowdown
factors per application class, grouped into tiers). What we changed, and ours: a GPU's factor
scales the compute part of Pollux's step (alpha_c, beta_c) and not its sync; a spread's inter-node
sync (alpha_n, beta_n) scales with B_ref / B, B the bottleneck bandwidth of the links joining its
nodes in the topology graph (schedlab.topology) and B_ref the node link bandwidth the model was
fitted at; a job spanning nodes runs `across_node_factor` times slower (PAL's flat penalty, 1
unless the topology sets it). Factors of one class within `tier_tolerance` (relative) of a tier's
smallest are one tier, valued at the tier's largest: predictions are never optimistic.

Sets
    J             jobs, a_j the variability class of job j;  S the GPU signatures: a GPU's tier
                  in every class in play
    H             homogeneous node groups: nodes of one GPU type, size G_g, rack and signature
                  (every GPU of the node alike); K_g its nodes; L_g = chain_levels(G_g)
    X             heterogeneous nodes (GPUs of several signatures), each alone; Sl_k its slices
                  (its GPUs of one signature), n_ks GPUs in slice s
    W = H u X     pools of whole nodes; |K_w| nodes, worst factor tau_wa over its GPUs
    C_j           options of job j:
                  single(g, d)     d in L_g GPUs on one node of g in H
                  comp(k, m)       m_s GPUs of each slice s of k in X, any total >= 1
                  multi(n, t, R)   n >= 2 whole nodes of one GPU type and size, from the pools
                                   E_c = {w: tau_w,a_j <= t, rack(w) in R}, R one rack or all
                  stay             a running job keeps exactly its GPUs
Parameters
    tau_c     worst factor of option c's GPUs for a_j (single: the group's; comp: the worst slice
              used; multi: t; stay: its GPUs')
    g_c       goodput at the best batch (models.efficiency.best_batch) with compute x tau_c,
              inter-node sync x B_ref / B_c, and the whole step x across_node_factor if spread
    u_c, U0_j, s'_c   utility, unallocated utility, penalized speedup as goodput.py (the fair
              share valued on a typical GPU: variability shows in the speedups)
    a_c, z_c  GPUs and GPUs per node of single(g, d) (a_c = z_c = d); n_c of multi;
    h_kc      GPUs stay option c holds on a homogeneous node k; h_kcs on slice s of k in X
Variables
    x_c in {0, 1}       option c is chosen
    v_jw in Z, >= 0     whole nodes of pool w that job j takes (for its multi option)
    w_kd in Z, >= 0     goodput.py's free d-slots of a homogeneous node with several stayers
    t                   max-min only, as goodput.py
Objective
    as goodput.py:  maximize  sum_j U0_j + sum_c (u_c - U0_j(c)) x_c   (max-min: + M t)
Constraints
    (one)    sum_{c in C_j} x_c <= 1                                                 for j
    (level)  sum_{c single in g, z_c >= d} (a_c / d) x_c + (G_g / d) sum_j v_jg
               + sum_{k in K1_g} sum_{c in S_k} ceil(h_kc / d) x_c - sum_{k in K2_g} w_kd
               <= |K_g \ K2_g| G_g / d                                        for g in H, d in L_g
    (slots)  d w_kd + sum_{c in S_k} h_kc x_c <= G_g                       for k in K2_g, d in L_g
    (slice)  sum_{c comp on k} m_cs x_c + sum_{c stay} h_kcs x_c + n_ks sum_j v_jk <= n_ks
                                                                            for k in X, s in Sl_k
    (pool)   sum_w v_jw = sum_{c multi of j} n_c x_c                                  for j
    (elig)   v_jw <= |K_w| sum_{c multi of j, w in E_c} x_c                         for j, w
    (minspd) as goodput.py (max-min)

Why it is exact. By (one) a job takes at most one option, so (elig) lets v_j. use only the pools
of its chosen multi option and (pool) makes them n_c whole nodes: the option's value is a lower
bound of what those nodes give (their worst factor <= t, their racks in R), and the option with
t and R equal to the realized ones exists, so the optimum over options is the optimum over
concrete placements of these shapes. A heterogeneous node is one bin whose GPUs of one slice are
interchangeable: (slice) is exactly its capacity, a whole node taking all of it. A homogeneous
group is goodput.py's node group, whole nodes being items of size G_g in its chain, so its
(level) argument holds unchanged. Decoding places stayers, then whole nodes, then single-node
items largest first (packing.py), then compositions on their slices: it never fails; the
verifier checks anyway, and a brute-force test over every placement checks the optimum.

Smaller, still exact: a larger shape of one pool or multi-node definition is kept only if worth
more than the smaller ones; a composition only if worth more than every composition it contains;
a multi-node definition only at the tiers where its eligible nodes grow. Freeze levels fold in as
formulations/freezing.py proves for goodput.py (fold_freeze_levels: each option at its best
admissible level, the same model size). Not modelled: links shared by several jobs (a spread's
bandwidth is its own); a spread over racks is priced at the smallest rack uplink of the cluster.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

from schedlab.errors import DecodeError
from schedlab.formulations.freezing import fold_freeze_levels, has_freezing
from schedlab.formulations.goodput import max_min_upper, max_min_weight, min_job_speedup, objective_value
from schedlab.formulations.options import (
    chain_levels,
    fair_shapes,
    field_values,
    job_allocations,
    multi_node_counts,
    node_groups,
    prune_dominated,
    restart_factor,
    stay_options,
    unallocated_utilities,
    utility,
)
from schedlab.formulations.packing import NodeState
from schedlab.milp import MilpArrays, OneModel, Rows, stack_rows
from schedlab.models.efficiency import BatchChoice, best_batch
from schedlab.models.freezing import scaled_params
from schedlab.state import BatchLimits, GpuRef, GradStats, JobAllocation, JobSpec, RoundInput, ThroughputParams, Topology
from schedlab.topology import cluster_graph, spread_gbps

if TYPE_CHECKING:
    import pyomo.environ as pyo

SINGLE, COMP, MULTI, STAY = 0, 1, 2, 3


def tiers(values: list[float], tolerance: float) -> dict[float, float]:
    """Each factor -> its tier's value: sorted factors within `tolerance` (relative) of a tier's
    smallest join it; a tier is valued at its largest factor."""
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
    """Interchangeable nodes: a homogeneous group (several nodes) or one heterogeneous node."""

    gpu_type: str
    gpus_per_node: int
    rack: str
    nodes: tuple[int, ...]  # cluster indices
    slices: tuple[tuple[int, ...], ...]  # GPU indices of each signature (one slice if homogeneous)
    signatures: tuple[tuple[float, ...], ...]  # per slice: the tier of every class in play

    @property
    def homogeneous(self) -> bool:
        return len(self.slices) == 1

    @property
    def levels(self) -> tuple[int, ...]:
        return chain_levels(self.gpus_per_node)

    def worst(self, cls: int) -> float:
        return max(sig[cls] for sig in self.signatures)


@dataclass(frozen=True)
class JointCluster:
    """The round's cluster as the joint model sees it: classes in play, GPU tiers and pools."""

    classes: tuple[str, ...]
    gpu_tier: dict[tuple[int, int], tuple[float, ...]]  # (node index, GPU) -> signature
    pools: tuple[Pool, ...]
    pool_of: dict[int, int]  # node index -> pool
    rack_of: tuple[str, ...]  # per node index
    cross_rack_scale: float  # B_ref / B of a spread over racks
    rack_scale: dict[str, float]  # B_ref / B of a spread within each rack
    across_node_factor: float


def joint_cluster(ri: RoundInput) -> JointCluster:
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
class JointOptions:
    """Every option of the round (columnar, as formulations.options.OptionSet) and its structure.

    comp_id[c] indexes compositions[pool[c]] for a composition (-1 otherwise); gpu_type, tau and
    sync_scale are what an option's value was computed from (so freezing can revalue it)."""

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

    @property
    def num_options(self) -> int:
        return len(self.job)

    @property
    def num_jobs(self) -> int:
        return len(self.round_input.jobs)

    def stay_option(self, j: int) -> int:
        return self._stay_options[j]

    @cached_property
    def _stay_options(self) -> dict[int, int]:
        return stay_options(self.job, self.kind == STAY)

    def comp(self, c: int) -> tuple[int, ...]:
        """Option c's GPUs per slice of its heterogeneous node (() for other kinds)."""
        return self.compositions[self.pool[c]][self.comp_id[c]] if self.kind[c] == COMP else ()

    def revalue(self, which: np.ndarray, compute: np.ndarray, sync: np.ndarray) -> BatchChoice:
        """The best batch of options `which` with their compute and sync times scaled by
        `compute[i]` and `sync[i]` (e.g. layers frozen: models.freezing.scaled_params)."""
        nodes = self.num_nodes[which]
        return BatchChoice(*_value(self.round_input.jobs, self.job[which], self.gpu_type[which], nodes,
                                   self.num_gpus[which], self.tau[which], self.sync_scale[which],
                                   np.where(nodes > 1, self.cluster.across_node_factor, 1.0),
                                   (np.asarray(compute, dtype=float), np.asarray(sync, dtype=float))))

    def undominated(self, util: np.ndarray) -> np.ndarray:
        return _undominated(self, util)

    def subset(self, pick: np.ndarray) -> JointOptions:
        kept = set(self.job[pick[self.kind[pick] == STAY]].tolist())
        rows = {name: getattr(self, name)[pick] for name in (
            "job", "kind", "pool", "num_nodes", "num_gpus", "comp_id", "gpu_type", "tau", "sync_scale", "goodput",
            "speedup", "penalized_speedup", "utility", "local_bsz", "accum_steps")}
        return replace(self, **rows, stay_gpus={j: g for j, g in self.stay_gpus.items() if j in kept})


def compositions(pool: Pool) -> list[tuple[int, ...]]:
    """Every count vector over a heterogeneous node's slices (any total: the node is its own
    bin, so no size chain is needed, and 3 fast GPUs beside a slow one make a 3-GPU job)."""
    return [m for m in itertools.product(*(range(len(s) + 1) for s in pool.slices)) if sum(m)]


@dataclass(frozen=True)
class Multi:
    """A multi-node option's definition: its eligible pools."""

    pools: tuple[int, ...]


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

    def add(self, kind, pool, nodes, gpus, tau, sync_scale, gpu_type, comp=-1) -> None:
        for name, value in zip(("kind", "pool", "nodes", "gpus", "tau", "sync_scale", "gpu_type", "comp"),
                               (kind, pool, nodes, gpus, tau, sync_scale, gpu_type, comp)):
            getattr(self, name).append(value)

    def arrays(self) -> dict[str, np.ndarray]:
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
           tau: np.ndarray, sync: np.ndarray, spread: np.ndarray, frozen: tuple[np.ndarray, np.ndarray] | None = None):
    """Best batch of every row in one vectorized call, each distinct (job, GPU type, shape, tier,
    sync scale, spread factor and, with `frozen` = (c, s) per row, freeze scales) valued once,
    with the parameters scaled as the docstring says (first by c and s, as scaled_params)."""
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
    """Options that no other option of the same job beats with a subset of its resources:
    within a pool or multi-node definition a larger shape must be worth more (prune_dominated);
    on a heterogeneous node a composition must be worth more than every one it contains."""
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
    """Every job's options with goodput, speedup and utility; prune=False keeps dominated ones
    (freezing folds its levels in before pruning)."""
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


@dataclass(frozen=True)
class Structure:
    """Index sets shared by the array and the Pyomo builds (the docstring's sets)."""

    single_stayer: dict[int, tuple[int, int]]  # homogeneous node k in K1 -> (stay option, h_kc)
    multi_stayer: dict[int, list[tuple[int, int]]]  # homogeneous node k in K2 -> [(c, h_kc)]
    slice_stayers: dict[tuple[int, int], list[tuple[int, int]]]  # (heterogeneous pool, slice) -> [(c, h)]
    v_cols: tuple[tuple[int, int], ...]  # (job, pool) of every v, in column order
    w_cols: tuple[tuple[int, int], ...]  # (node, level) of every w, in column order


def structure(opts: JointOptions) -> Structure:
    cl = opts.cluster
    holders: dict[int, list[tuple[int, int]]] = {}
    slice_stayers: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for j, held in opts.stay_gpus.items():
        c = opts.stay_option(j)
        for k, gpus in held.items():
            pool = cl.pools[cl.pool_of[k]]
            if pool.homogeneous:
                holders.setdefault(k, []).append((c, len(gpus)))
            else:
                for s, members in enumerate(pool.slices):
                    h = len(set(gpus) & set(members))
                    if h:
                        slice_stayers.setdefault((cl.pool_of[k], s), []).append((c, h))
    multi = np.flatnonzero(opts.kind == MULTI)
    pairs = {(int(j), p) for j, d in set(zip(opts.job[multi].tolist(), opts.pool[multi].tolist()))
             for p in opts.multi[d].pools}
    multi_stayer = {k: hs for k, hs in holders.items() if len(hs) > 1}
    w_cols = tuple((k, d) for k in sorted(multi_stayer) for d in cl.pools[cl.pool_of[k]].levels)
    return Structure({k: hs[0] for k, hs in holders.items() if len(hs) == 1}, multi_stayer, slice_stayers,
                     tuple(sorted(pairs)), w_cols)


def _constraints(opts: JointOptions, st: Structure) -> dict[str, Rows]:
    """Every constraint of the docstring, by tag. Both builds read these blocks, so the arrays
    and the Pyomo model are the same rows."""
    cl, n, inf = opts.cluster, opts.num_options, math.inf
    num_v = len(st.v_cols)
    v_job = np.array([j for j, _ in st.v_cols], dtype=int)
    v_pool = np.array([p for _, p in st.v_cols], dtype=int)
    w_index = {kd: n + num_v + i for i, kd in enumerate(st.w_cols)}
    out = {tag: Rows() for tag in ("one", "level", "slots", "slice", "pool", "elig")}
    jobs_with = np.unique(opts.job)
    out["one"].extend([(int(j),) for j in jobs_with], np.searchsorted(jobs_with, opts.job), np.arange(n),
                      np.ones(n), -inf, 1.0)
    for p, pool in enumerate(cl.pools):
        G = pool.gpus_per_node
        v_here = n + np.flatnonzero(v_pool == p)
        if pool.homogeneous:
            k2 = [k for k in pool.nodes if k in st.multi_stayer]
            k1 = [st.single_stayer[k] for k in pool.nodes if k in st.single_stayer]
            singles = np.flatnonzero((opts.kind == SINGLE) & (opts.pool == p))
            for d in pool.levels:
                big = singles[opts.num_gpus[singles] >= d]
                cols = np.concatenate([big, v_here, [c for c, _ in k1], [w_index[k, d] for k in k2]])
                vals = np.concatenate([opts.num_gpus[big] / d, np.full(len(v_here), G / d),
                                       [math.ceil(h / d) for _, h in k1], -np.ones(len(k2))])
                out["level"].add((p, d), cols, vals, -inf, (len(pool.nodes) - len(k2)) * G / d)
            for k in k2:
                for d in pool.levels:
                    holders = st.multi_stayer[k]
                    out["slots"].add((k, d), [w_index[k, d]] + [c for c, _ in holders],
                                     [float(d)] + [float(h) for _, h in holders], -inf, float(G))
            continue
        comps = np.flatnonzero((opts.kind == COMP) & (opts.pool == p))
        counts = np.array(opts.compositions[p]).reshape(-1, len(pool.slices))[opts.comp_id[comps]]
        for s, members in enumerate(pool.slices):
            used = counts[:, s] > 0
            stayers = st.slice_stayers.get((p, s), [])
            cols = np.concatenate([comps[used], [c for c, _ in stayers], v_here])
            vals = np.concatenate([counts[used, s], [h for _, h in stayers], np.full(len(v_here), len(members))])
            out["slice"].add((p, s), cols, vals, -inf, float(len(members)))
    multi = np.flatnonzero(opts.kind == MULTI)
    jobs_v = np.unique(v_job)
    pool_row = np.searchsorted(jobs_v, v_job)  # (pool) row of each v
    out["pool"].extend([(int(j),) for j in jobs_v], np.concatenate([pool_row, np.searchsorted(jobs_v, opts.job[multi])]),
                       np.concatenate([n + np.arange(num_v), multi]),
                       np.concatenate([np.ones(num_v), -opts.num_nodes[multi]]), 0.0, 0.0)
    v_of = np.full((opts.num_jobs, len(cl.pools)), -1)  # (elig) row = v column index
    v_of[v_job, v_pool] = np.arange(num_v)
    member = np.array([[p in opts.multi[d].pools for p in range(len(cl.pools))] for d in range(len(opts.multi))],
                      dtype=bool).reshape(len(opts.multi), len(cl.pools))
    c_idx, p_idx = np.nonzero(member[opts.pool[multi]])
    size = np.array([len(pool.nodes) for pool in cl.pools], dtype=float)
    out["elig"].extend([(int(j), int(p)) for j, p in st.v_cols],
                       np.concatenate([np.arange(num_v), v_of[opts.job[multi[c_idx]], p_idx]]),
                       np.concatenate([n + np.arange(num_v), multi[c_idx]]),
                       np.concatenate([np.ones(num_v), -size[p_idx]]), -inf, 0.0)
    return out


def _columns(opts: JointOptions, st: Structure) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Objective coefficients, upper bounds and integrality of x, v, w, then t (max-min)."""
    cl, n = opts.cluster, opts.num_options
    max_min = opts.round_input.settings.max_min
    c = np.concatenate([opts.utility - opts.U0[opts.job], np.zeros(len(st.v_cols) + len(st.w_cols))])
    hi = np.concatenate([np.ones(n), [float(len(cl.pools[p].nodes)) for _, p in st.v_cols],
                         [cl.pools[cl.pool_of[k]].gpus_per_node // d for k, d in st.w_cols]])
    integer = np.ones(len(c), dtype=bool)
    if max_min:
        c = np.append(c, max_min_weight(opts))
        hi = np.append(hi, max_min_upper(opts))
        integer = np.append(integer, False)
    return c, hi, integer


def start_point(opts: JointOptions, st: Structure) -> np.ndarray:
    """Every running job stays (x, then v = 0, then w filled, then t)."""
    n = opts.num_options
    v = np.zeros(n + len(st.v_cols) + len(st.w_cols) + opts.round_input.settings.max_min)
    for j in opts.stay_gpus:
        v[opts.stay_option(j)] = 1.0
    for i, (k, d) in enumerate(st.w_cols):
        G = opts.cluster.pools[opts.cluster.pool_of[k]].gpus_per_node
        v[n + len(st.v_cols) + i] = (G - sum(h for _, h in st.multi_stayer[k])) // d
    if opts.round_input.settings.max_min:
        v[-1] = min_job_speedup(opts, v[:n])
    return v


def _minspd(opts: JointOptions, t: int) -> Rows:
    """(minspd): t - sum_{c in C_j} s'_c x_c <= 0 for every job (max-min)."""
    block = Rows()
    for j in range(opts.num_jobs):
        mine = np.flatnonzero(opts.job == j)
        block.add((j,), np.concatenate([[t], mine]), np.concatenate([[1.0], -opts.penalized_speedup[mine]]),
                  -math.inf, 0.0)
    return block


def _blocks(opts: JointOptions, st: Structure, num_cols: int) -> dict[str, Rows]:
    blocks = _constraints(opts, st)
    if opts.round_input.settings.max_min:
        blocks["minspd"] = _minspd(opts, num_cols - 1)
    return blocks


def build_arrays(opts: JointOptions, st: Structure) -> MilpArrays:
    c, col_hi, integer = _columns(opts, st)
    A, lo, hi = stack_rows(list(_blocks(opts, st, len(c)).values()), len(c))
    return MilpArrays(c=c, offset=float(opts.U0.sum()), A=A, row_lo=lo, row_hi=hi,
                      col_lo=np.zeros(len(c)), col_hi=col_hi, integer=integer, start=start_point(opts, st),
                      choice=_column_jobs(opts, st, len(c)))


def _column_jobs(opts: JointOptions, st: Structure, num_cols: int) -> np.ndarray:
    """The job of every column: x and v belong to their job; w and t to none (-1)."""
    jobs = np.full(num_cols, -1)
    jobs[: opts.num_options] = opts.job
    jobs[opts.num_options: opts.num_options + len(st.v_cols)] = [j for j, _ in st.v_cols]
    return jobs


def build_pyomo(opts: JointOptions, st: Structure) -> pyo.ConcreteModel:
    """The same model in Pyomo: x indexed by (job id, option) as goodput's (option_label), with
    the same parameters over C (gpus, nodes, speedup, utility: a customization written for one
    model runs on the other), v by (job id, pool), w by (node, level), one Constraint per tag of
    the docstring over the same rows."""
    import pyomo.environ as pyo  # here, not at the top: rounds solved from arrays never load Pyomo

    c, col_hi, integer = _columns(opts, st)
    jobs = opts.round_input.jobs
    m = pyo.ConcreteModel(name="joint")
    labels = [option_label(opts, k) for k in range(opts.num_options)]
    m.C = pyo.Set(dimen=2, initialize=labels, ordered=True)
    m.gpus = pyo.Param(m.C, initialize=dict(zip(labels, opts.num_gpus.tolist())))
    m.nodes = pyo.Param(m.C, initialize=dict(zip(labels, opts.num_nodes.tolist())))
    m.speedup = pyo.Param(m.C, initialize=dict(zip(labels, opts.penalized_speedup.tolist())))
    m.utility = pyo.Param(m.C, initialize=dict(zip(labels, opts.utility.tolist())))
    m.V = pyo.Set(dimen=2, initialize=[(jobs[j].id, p) for j, p in st.v_cols], ordered=True)
    m.K2L = pyo.Set(dimen=2, initialize=st.w_cols, ordered=True)
    m.x = pyo.Var(m.C, domain=pyo.Binary)
    m.v = pyo.Var(m.V, domain=pyo.NonNegativeIntegers)
    m.w = pyo.Var(m.K2L, domain=pyo.NonNegativeIntegers)
    columns = [m.x[lab] for lab in labels] + [m.v[jobs[j].id, p] for j, p in st.v_cols] + [m.w[kd] for kd in st.w_cols]
    if opts.round_input.settings.max_min:
        m.t = pyo.Var(domain=pyo.NonNegativeReals)
        columns.append(m.t)
    for var, ub in zip(columns, col_hi):
        var.setub(float(ub))
    for tag, block in _blocks(opts, st, len(c)).items():
        r, k, v = block.coo()
        A = sp.csr_matrix((v, (r, k)), shape=(len(block.keys), len(c)))
        row_of = {key: i for i, key in enumerate(block.keys)}
        setattr(m, tag, pyo.Constraint(block.keys, rule=lambda m, *key, A=A, block=block, row_of=row_of: _row(
            columns, A, row_of[key], block.lo[row_of[key]], block.hi[row_of[key]])))
    m.obj = pyo.Objective(expr=float(opts.U0.sum()) + sum(float(ci) * var for ci, var in zip(c, columns) if ci),
                          sense=pyo.maximize)
    m.columns = columns
    return m


def _row(columns: list, A: sp.csr_matrix, i: int, lo: float, hi: float):
    cols, vals = A.indices[A.indptr[i]:A.indptr[i + 1]], A.data[A.indptr[i]:A.indptr[i + 1]]
    body = sum(float(a) * columns[k] for k, a in zip(cols, vals))
    return body == hi if lo == hi else body <= hi


def option_label(opts: JointOptions, c: int) -> tuple[str, str]:
    """(job id, option) of option c: "stay", or its kind and shape (e.g. "single:p3:2": 2 GPUs of
    pool 3, "multi1:n2": 2 whole nodes of multi-node pool 1, "comp:p0:1x2": a composition)."""
    job = opts.round_input.jobs[opts.job[c]].id
    kind = int(opts.kind[c])
    if kind == STAY:
        return job, "stay"
    if kind == MULTI:
        return job, f"multi{int(opts.pool[c])}:n{int(opts.num_nodes[c])}"
    name = "single" if kind == SINGLE else "comp"
    shape = "x".join(map(str, opts.comp(c))) if kind == COMP else str(int(opts.num_gpus[c]))
    return job, f"{name}:p{int(opts.pool[c])}:{shape}"


def decode(opts: JointOptions, st: Structure, values: np.ndarray) -> tuple[JobAllocation, ...]:
    """Concrete GPUs: stayers, then whole nodes, then single-node items largest first, then
    compositions on their slices."""
    jobs, cl, nodes = opts.round_input.jobs, opts.cluster, opts.round_input.cluster.nodes
    n = opts.num_options
    chosen = np.asarray(values[:n]) > 0.5
    state = NodeState(opts.round_input.cluster)
    picked = np.flatnonzero(chosen)
    gpus_of: dict[int, tuple[GpuRef, ...]] = {}
    for c in picked[opts.kind[picked] == STAY]:
        job = jobs[opts.job[c]]
        if not state.take_exact(job.current_gpus):
            raise DecodeError(f"job {job.id!r} cannot stay: its GPUs are taken")
        gpus_of[c] = job.current_gpus
    whole = {jw: int(round(values[n + i])) for i, jw in enumerate(st.v_cols)}
    for c in picked[opts.kind[picked] == MULTI]:
        j, refs = int(opts.job[c]), list[GpuRef]()
        for p in opts.multi[opts.pool[c]].pools:
            count = whole.get((j, p), 0)
            pool = cl.pools[p]
            taken = state.take_shape(pool.nodes, count, pool.gpus_per_node) if count else ()
            if taken is None:
                raise DecodeError(f"no {count} free whole nodes in pool {p} for job {jobs[j].id!r}")
            refs += taken
        if len(refs) != opts.num_gpus[c]:
            raise DecodeError(f"job {jobs[j].id!r} got {len(refs)} GPUs of whole nodes, not {opts.num_gpus[c]}")
        gpus_of[c] = tuple(refs)
    singles = picked[opts.kind[picked] == SINGLE]
    for c in sorted(singles, key=lambda c: (-opts.num_gpus[c], c)):
        single = state.take_shape(cl.pools[opts.pool[c]].nodes, 1, int(opts.num_gpus[c]))
        if single is None:
            raise DecodeError(f"no room for job {jobs[opts.job[c]].id!r} ({opts.num_gpus[c]} GPUs)")
        gpus_of[c] = single
    for c in picked[opts.kind[picked] == COMP]:
        pool = cl.pools[opts.pool[c]]
        k = pool.nodes[0]
        indices: list[int] = []
        for members, count in zip(pool.slices, opts.comp(c)):
            free = [i for i in state.free[k] if i in members][:count]
            if len(free) < count:
                raise DecodeError(f"no room on node {nodes[k].id!r} for job {jobs[opts.job[c]].id!r}")
            indices += free
        state.set_free(k, [i for i in state.free[k] if i not in indices])
        gpus_of[c] = tuple(GpuRef(nodes[k].id, i) for i in indices)
    return job_allocations(opts, picked, gpus_of)


def greedy_point(opts: JointOptions, st: Structure) -> np.ndarray:
    """A feasible point: running jobs stay, then each job by the value its best option adds
    takes the best option that still fits (whole nodes from the emptiest eligible pools)."""
    cl, n = opts.cluster, opts.num_options
    point = np.zeros(n + len(st.v_cols) + len(st.w_cols) + opts.round_input.settings.max_min)
    v_index = {jw: n + i for i, jw in enumerate(st.v_cols)}
    free = {k: set(range(node.gpus)) for k, node in enumerate(opts.round_input.cluster.nodes)}
    placed = set()
    for j, held in opts.stay_gpus.items():
        if all(set(g) <= free[k] for k, g in held.items()):
            for k, g in held.items():
                free[k] -= set(g)
            point[opts.stay_option(j)] = 1.0
            placed.add(j)
    gain = opts.utility - opts.U0[opts.job]
    for c in np.argsort(-gain, kind="stable"):
        j = int(opts.job[c])
        if j in placed or gain[c] <= 0 or opts.kind[c] == STAY:
            continue
        take = _fits(opts, c, free)
        if take is None:
            continue
        for k, gpus in take.items():
            free[k] -= gpus
            if opts.kind[c] == MULTI:
                point[v_index[j, cl.pool_of[k]]] += 1
        point[c] = 1.0
        placed.add(j)
    return point


def _fits(opts: JointOptions, c: int, free: dict[int, set[int]]) -> dict[int, set[int]] | None:
    """GPUs option c would take from `free` (node -> GPU indices), or None if it does not fit."""
    cl = opts.cluster
    if opts.kind[c] == MULTI:
        empty = [k for p in opts.multi[opts.pool[c]].pools for k in cl.pools[p].nodes
                 if len(free[k]) == cl.pools[p].gpus_per_node]
        need = int(opts.num_nodes[c])
        return {k: set(free[k]) for k in empty[:need]} if len(empty) >= need else None
    pool = cl.pools[opts.pool[c]]
    if opts.kind[c] == SINGLE:
        fits = sorted((len(free[k]), k) for k in pool.nodes if len(free[k]) >= opts.num_gpus[c])
        return {fits[0][1]: set(sorted(free[fits[0][1]])[: opts.num_gpus[c]])} if fits else None
    k = pool.nodes[0]
    take = set()
    for members, count in zip(pool.slices, opts.comp(c)):
        avail = sorted(free[k] & set(members))
        if len(avail) < count:
            return None
        take |= set(avail[:count])
    return {k: take}


@dataclass(frozen=True)
class JointModel(OneModel):
    """The joint round (formulations.base.RoundModel)."""

    opts: JointOptions
    st: Structure

    @property
    def round_input(self) -> RoundInput:
        return self.opts.round_input

    def arrays(self) -> MilpArrays:
        return build_arrays(self.opts, self.st)

    def pyomo(self) -> pyo.ConcreteModel:
        return build_pyomo(self.opts, self.st)

    def start(self) -> np.ndarray:
        return start_point(self.opts, self.st)

    def decode(self, values: np.ndarray) -> tuple[JobAllocation, ...]:
        return decode(self.opts, self.st, values)

    def objective(self, values: np.ndarray) -> float:
        return objective_value(self.opts, np.asarray(values[: self.opts.num_options]) > 0.5)

    def fallback(self) -> np.ndarray:
        return greedy_point(self.opts, self.st)


def joint_model(round_input: RoundInput) -> JointModel:
    """The joint round, with freeze levels folded in (formulations.freezing) when a job opts in."""
    if has_freezing(round_input):
        opts = fold_freeze_levels(round_input, enumerate_joint_options(round_input, prune=False))
    else:
        opts = enumerate_joint_options(round_input)
    return JointModel(opts, structure(opts))
