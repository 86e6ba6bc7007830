r"""Variability-aware placement (PAL, Jain et al. SC'24) as an exact MILP over GPU types.

The jobs chosen to run this round (gang-scheduled: job j needs exactly G_j GPUs) are placed on
concrete GPUs, trading each job's slowest GPU against the spread of its GPUs over nodes.

Sets
  J jobs; N nodes; K GPU types: GPUs on the same node with the same slowdown for every
  application class in play (interchangeable, so counted, not named); T_j = the distinct
  slowdowns tau_j0 < tau_j1 < ... of job j's class on the GPUs offered (its tiers); R the
  running jobs, S in R those that can stay (all their G_j current GPUs offered).
Parameters
  G_j GPUs of job j; w_j its weight; cap_k GPUs of type k, on node n(k), with tier t_j(k) for
  job j; L the across-node locality factor (PAL's simulator: 1.7); rho_j the restart penalty
  (fraction of a round) of moving running job j; cur_jk its current GPUs of type k.
Variables
  x_jk in {0..min(cap_k, G_j)}   GPUs of type k given to job j
  y_jn in {0,1}                 job j uses node n
  z_jt in {0,1}, t >= 1         job j uses a GPU of tier >= t (ordered tier binaries)
  m_j  in {0,1}                 job j spans more than one node (fixed to 1 when G_j exceeds the
                                largest node)
  p_j  in [0, 1/tau_j0]         = m_j * (1 / tau_worst), the part of the speed lost to spread
  s_j  in {0,1}, j in S         running job j keeps exactly its GPUs
Objective (maximize weighted job speed, speed = 1 / (worst slowdown x locality factor))
  sum_j w_j [ 1/tau_j0 + sum_{t>=1} d_jt z_jt - (1 - 1/L) p_j ] - sum_{j in R} w_j rho_j (1 - s_j)
  with s_j = 0 for j in R \ S, and d_jt = 1/tau_jt - 1/tau_j(t-1) < 0: the telescoped
  1/tau_worst, exact because z_j. is monotone and pushed down by the objective, up by (tier).
Constraints
  (place)    sum_k x_jk = G_j                                   for j: every job placed whole
  (cap)      sum_j x_jk <= cap_k                                for k: capacity per type
  (node)     x_jk <= min(cap_k, G_j) y_j,n(k)                   for j, k: nodes used
  (tier)     x_jk <= min(cap_k, G_j) z_j,t_j(k)                 for j, k with t_j(k) >= 1: tiers used
  (order)    z_j,t+1 <= z_jt                                    for j, t >= 1: ordered tiers
  (spread)   sum_n y_jn <= 1 + (min(|N|, G_j) - 1) m_j          for j: G_j GPUs span <= G_j nodes
  (onenode)  sum_{k on n} x_jk >= G_j (y_jn - m_j)              for j with G_j <= the largest node,
                                                                n: one node unless spread (valid,
                                                                and without it the LP spreads a
                                                                job for ~1/|N| of m)
  (lost)     p_j >= 1/tau_j0 + sum_t d_jt z_jt - (1/tau_j0)(1 - m_j)
                                                                for j: p's lower bound (it is
                                                                penalized, so it is tight)
  (stay)     x_jk >= cur_jk s_j                                 for j in S, k: staying keeps the
                                                                current GPUs
`build` writes these as arrays and `build_pyomo` as Pyomo components of the same names, from
the same index sets (`model_sets`), with the columns in one order: a test solves both.

As a round formulation (`placement_model`, FORMULATIONS["placement"]), every job of a RoundInput
is placed on exactly G_j = requested_gpus (else min_gpus) GPUs of its cluster: a GPU's slowdown
for a class is Node.slowdown's (1 where the node does not list the class), L the topology's
across_node_factor (1 without a topology), w_j = 1 and rho_j = 0 (a move shows in
JobAllocation.restarted, unpriced). Jobs train at fixed_bsz, else requested_bsz, else init_bsz;
goodput is not modelled (0), the job's speed is its speedup. PAL's greedy is the warm start and
the fallback, so an answer is never worse than it. Limitations: one GPU type per cluster (the
slowdowns compare GPUs of one type), and every job given is placed: the caller chooses which
jobs run (policies.placement: PAL's queue; policies.compose: an allocation policy).

What we changed from PAL: PAL places greedily (`pal_greedy`, here because it is this model's
warm start; policies.placement runs it as the `pal` policy); this is the exact model of the same
trade-off. Locality is counted per node (PAL's simulator has one across-node factor); moving a
job costs rho_j of its weight, PAL's "same GPUs, no restart". Solved by HiGHS
(solvers.highs_direct) or, from the same arrays, by CP-SAT (solvers.cpsat).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

import numpy as np
import pyomo.environ as pyo
import scipy.sparse as sp

from schedlab.errors import InputError
from schedlab.models.efficiency import split_fixed_batch
from schedlab.solvers.arrays import MilpArrays
from schedlab.solvers.outcome import FAILED, TIME_LIMIT
from schedlab.state import GpuRef, JobAllocation, JobSpec, RoundInput

Placement = dict[str, tuple[str, ...]]  # job id -> GPU ids


@dataclass(frozen=True)
class PlacementGpu:
    id: str
    node: str
    slowdown: Mapping[str, float]  # application class -> factor (1 = typical, higher = slower)


@dataclass(frozen=True)
class PlacementJob:
    id: str
    num_gpus: int
    app_class: str
    current_gpus: tuple[str, ...] = ()
    weight: float = 1.0


@dataclass(frozen=True)
class PlacementInput:
    gpus: tuple[PlacementGpu, ...]  # the GPUs the chosen jobs may use
    jobs: tuple[PlacementJob, ...]  # the jobs chosen to run, all to be placed
    across_node: float = 1.7
    restart_penalty: float = 0.0  # rho: fraction of a round's speed a move costs
    gpu_index: dict[str, PlacementGpu] = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "gpu_index", {g.id: g for g in self.gpus})
        need = sum(j.num_gpus for j in self.jobs)
        if need > len(self.gpus):
            raise InputError([f"placement: jobs need {need} GPUs, {len(self.gpus)} offered; choose fewer jobs"])
        holder: dict[str, str] = {}
        for j in self.jobs:
            for g in j.current_gpus:
                if g in holder:
                    raise InputError([f"placement: GPU {g} is current for both {holder[g]} and {j.id}; "
                                      "a GPU runs one job"])
                holder[g] = j.id
        for j in self.jobs:
            missing = [g for g in self.gpus if j.app_class not in g.slowdown]
            if missing:
                raise InputError([f"placement: GPU {missing[0].id} has no slowdown for class {j.app_class!r} "
                                  f"(job {j.id})"])

    def node_of(self, gpu: str) -> str:
        return self.gpu_index[gpu].node

    def by_node(self, gpu_ids: Iterable[str]) -> dict[str, list[str]]:
        """The GPUs grouped by node, in the order given."""
        out: dict[str, list[str]] = {}
        for g in gpu_ids:
            out.setdefault(self.node_of(g), []).append(g)
        return out


def job_speed(pi: PlacementInput, job: PlacementJob, gpu_ids: tuple[str, ...]) -> float:
    """1 / (worst slowdown of its GPUs x locality factor)."""
    chosen = [pi.gpu_index[g] for g in gpu_ids]
    worst = max(g.slowdown[job.app_class] for g in chosen)
    spread = pi.across_node if len({g.node for g in chosen}) > 1 else 1.0
    return 1.0 / (worst * spread)


def moved(job: PlacementJob, gpu_ids: tuple[str, ...]) -> bool:
    return bool(job.current_gpus) and set(gpu_ids) != set(job.current_gpus)


def placement_objective(pi: PlacementInput, placement: Mapping[str, tuple[str, ...]]) -> float:
    """The round objective of a placement (job id -> GPU ids), as the MILP counts it."""
    total = 0.0
    for job in pi.jobs:
        gpu_ids = placement[job.id]
        total += job.weight * (job_speed(pi, job, gpu_ids) - pi.restart_penalty * moved(job, gpu_ids))
    return total


def _sf(pi: PlacementInput, job: PlacementJob, gpu: str) -> float:
    return pi.gpu_index[gpu].slowdown[job.app_class]


def pm_take(pi: PlacementInput, job: PlacementJob, free: list[str]) -> list[str]:
    """PM-First: lowest slowdown first; ties go to the node with the most GPUs at that slowdown."""
    per_node = pi.by_node(free)
    same = {g: sum(1 for h in per_node[pi.node_of(g)] if _sf(pi, job, h) == _sf(pi, job, g)) for g in free}
    ranked = sorted(free, key=lambda g: (_sf(pi, job, g), -same[g], pi.node_of(g), g))
    return ranked[: job.num_gpus]


def _sensitivity(pi: PlacementInput, app_class: str) -> float:
    sfs = [g.slowdown[app_class] for g in pi.gpus]
    return max(sfs) - min(sfs)


def pal_greedy(pi: PlacementInput, rng: np.random.Generator) -> Placement:
    """PAL's greedy as published (Alg. 1): per class, entries (sf, within one node) costed sf and
    (sf, across nodes) costed sf x L, sorted by cost; jobs of the most variability-sensitive class
    first take the cheapest entry that fits; PM-First when none does."""
    free, out = [g.id for g in pi.gpus], {}
    order = sorted(range(len(pi.jobs)), key=lambda j: (-_sensitivity(pi, pi.jobs[j].app_class), j))
    for j in order:
        job = pi.jobs[j]
        levels = sorted({_sf(pi, job, g) for g in free})
        entries = sorted([(sf, False, sf) for sf in levels] + [(sf * pi.across_node, True, sf) for sf in levels])
        chosen = None
        for _, across, sf in entries:
            ok = [g for g in free if _sf(pi, job, g) <= sf + 1e-12]
            if across and len(ok) >= job.num_gpus:
                chosen = sorted(ok, key=lambda g: (_sf(pi, job, g), pi.node_of(g), g))[: job.num_gpus]
            elif not across:
                nodes = [gs for gs in pi.by_node(ok).values() if len(gs) >= job.num_gpus]
                if nodes:  # the tightest node: fewest spare GPUs left behind
                    best = min(nodes, key=lambda gs: (len(gs), pi.node_of(gs[0])))
                    chosen = sorted(best, key=lambda g: (_sf(pi, job, g), g))[: job.num_gpus]
            if chosen:
                break
        out[job.id] = tuple(chosen or pm_take(pi, job, free))
        free = [g for g in free if g not in out[job.id]]
    return {job.id: out[job.id] for job in pi.jobs}


@dataclass(frozen=True)
class ModelSets:
    """The model's index sets and parameters (module docstring), shared by `build` and
    `build_pyomo` so that the two are one model."""

    types: tuple[tuple[str, ...], ...]  # K: the GPU ids of each type
    cap: np.ndarray  # cap_k
    nodes: tuple[str, ...]  # N
    node_of: np.ndarray  # n(k)
    largest_node: int  # GPUs of the largest node
    need: np.ndarray  # G_j
    tiers: tuple[np.ndarray, ...]  # per job: tau_j0 < tau_j1 < ...
    tier_of: tuple[np.ndarray, ...]  # per job: t_j(k)
    current: tuple[dict[int, int] | None, ...]  # per job: cur_jk (type -> GPUs) if in S, else None

    def bound(self, j: int, k: int) -> float:
        """min(cap_k, G_j): x_jk's upper bound, the big-M of (node) and (tier)."""
        return float(min(self.cap[k], self.need[j]))

    def gain(self, j: int) -> np.ndarray:
        """d_jt for t >= 1 (at index t - 1)."""
        return 1 / self.tiers[j][1:] - 1 / self.tiers[j][:-1]

    def spans(self, j: int) -> bool:
        """No node holds job j, so m_j = 1."""
        return bool(self.need[j] > self.largest_node)

    def spread_max(self, j: int) -> float:
        """min(|N|, G_j) - 1: the extra nodes a spread job may use."""
        return float(min(len(self.nodes), self.need[j]) - 1)

    def on_node(self, n: int) -> np.ndarray:
        """The types on node n."""
        return np.flatnonzero(self.node_of == n)


def gpu_types(pi: PlacementInput) -> list[tuple[str, ...]]:
    """GPUs grouped by node and slowdown for every class in play (interchangeable GPUs)."""
    classes = sorted({j.app_class for j in pi.jobs})
    groups: dict[tuple, list[str]] = {}
    for g in pi.gpus:
        groups.setdefault((g.node, *(round(g.slowdown[c], 9) for c in classes)), []).append(g.id)
    return [tuple(ids) for ids in groups.values()]


def model_sets(pi: PlacementInput) -> ModelSets:
    types = gpu_types(pi)
    type_of = _type_of(types)
    cap = np.array([len(t) for t in types], dtype=int)
    nodes = tuple(sorted({pi.node_of(t[0]) for t in types}))
    node_of = np.array([nodes.index(pi.node_of(t[0])) for t in types], dtype=int)
    largest_node = int(np.bincount(node_of, weights=cap, minlength=len(nodes)).max(initial=0))
    tiers, tier_of = [], []
    for job in pi.jobs:
        tau_k = np.round([pi.gpu_index[t[0]].slowdown[job.app_class] for t in types], 9)
        tiers.append(np.unique(tau_k))
        tier_of.append(np.searchsorted(tiers[-1], tau_k))
    need = np.array([j.num_gpus for j in pi.jobs], dtype=int)
    return ModelSets(tuple(types), cap, nodes, node_of, largest_node, need, tuple(tiers), tuple(tier_of),
                     tuple(_current_counts(j, type_of) for j in pi.jobs))


@dataclass(frozen=True)
class JobColumns:
    """One job's columns: x per type, y per node, z per tier >= 1, m, p, s (-1: none)."""

    x: tuple[int, ...]
    y: tuple[int, ...]
    z: tuple[int, ...]
    m: int
    p: int
    s: int
    tiers: tuple[float, ...]


@dataclass(frozen=True)
class PlacementModel:
    arrays: MilpArrays
    types: tuple[tuple[str, ...], ...]  # GPU ids per type
    nodes: tuple[str, ...]
    jobs: tuple[JobColumns, ...]

    @property
    def x_cols(self) -> dict[tuple[int, int], int]:
        return {(j, k): c for j, cols in enumerate(self.jobs) for k, c in enumerate(cols.x)}


def build(pi: PlacementInput) -> PlacementModel:
    """The model as arrays, row blocks tagged as in the module docstring. Columns, job by job:
    x per type, y per node, z per tier >= 1, m, p, then s if the job can stay."""
    st = model_sets(pi)
    types = range(len(st.types))
    cols: list[tuple[float, float, float, bool]] = []  # (c, lo, hi, integer)
    rows: list[tuple[dict[int, float], float, float]] = []  # (coefficients, lo, hi)

    def col(c: float, hi: float, lo: float = 0.0, integer: bool = True) -> int:
        cols.append((c, lo, hi, integer))
        return len(cols) - 1

    job_cols: list[JobColumns] = []
    offset = 0.0
    for j, job in enumerate(pi.jobs):
        w, G, inv0, d = job.weight, float(st.need[j]), 1 / st.tiers[j][0], st.gain(j)
        offset += w * inv0 - w * pi.restart_penalty * bool(job.current_gpus)
        x = [col(0.0, st.bound(j, k)) for k in types]
        y = [col(0.0, 1.0) for _ in st.nodes]
        z = [col(w * d_t, 1.0) for d_t in d]  # z[t - 1] is tier t
        m = col(0.0, 1.0, lo=float(st.spans(j)))
        p = col(-w * (1 - 1 / pi.across_node), inv0, integer=False)
        s = col(w * pi.restart_penalty, 1.0) if st.current[j] is not None else -1
        rows.append(({x[k]: 1.0 for k in types}, G, G))  # (place)
        for k in types:
            rows.append(({x[k]: 1.0, y[st.node_of[k]]: -st.bound(j, k)}, -np.inf, 0.0))  # (node)
            if st.tier_of[j][k] >= 1:
                rows.append(({x[k]: 1.0, z[st.tier_of[j][k] - 1]: -st.bound(j, k)}, -np.inf, 0.0))  # (tier)
        for t in range(1, len(z)):
            rows.append(({z[t]: 1.0, z[t - 1]: -1.0}, -np.inf, 0.0))  # (order)
        rows.append(({**{yn: 1.0 for yn in y}, m: -st.spread_max(j)}, -np.inf, 1.0))  # (spread)
        if not st.spans(j):
            for n, yn in enumerate(y):  # (onenode)
                rows.append(({**{x[k]: 1.0 for k in st.on_node(n)}, yn: -G, m: G}, 0.0, np.inf))
        rows.append(({p: 1.0, **{z[t]: -d[t] for t in range(len(z))}, m: -inv0}, 0.0, np.inf))  # (lost)
        for k, count in (st.current[j] or {}).items():  # (stay)
            rows.append(({x[k]: 1.0, s: -float(count)}, 0.0, np.inf))
        job_cols.append(JobColumns(tuple(x), tuple(y), tuple(z), m, p, s, tuple(st.tiers[j])))
    for k in types:  # (cap)
        rows.append(({cols_j.x[k]: 1.0 for cols_j in job_cols}, -np.inf, float(st.cap[k])))
    c, lo, hi, integer = (np.array(v) for v in zip(*cols)) if cols else (np.zeros(0),) * 4
    data, indices, indptr = [], [], [0]
    for coefs, _, _ in rows:
        indices += list(coefs)
        data += list(coefs.values())
        indptr.append(len(indices))
    A = sp.csr_matrix((data, indices, indptr), shape=(len(rows), len(cols)))
    arrays = MilpArrays(c.astype(float), offset, A, np.array([r[1] for r in rows], float),
                        np.array([r[2] for r in rows], float), lo.astype(float), hi.astype(float), integer.astype(bool))
    return PlacementModel(arrays, st.types, st.nodes, tuple(job_cols))


def build_pyomo(pi: PlacementInput) -> pyo.ConcreteModel:
    """The same model in Pyomo, term by term as `build` and the module docstring; `columns` lists
    its variables in `build`'s column order."""
    st = model_sets(pi)
    jobs, types, nodes = range(len(pi.jobs)), range(len(st.types)), range(len(st.nodes))
    weight = [job.weight for job in pi.jobs]
    model = pyo.ConcreteModel(name="placement")
    model.J, model.K, model.N = pyo.Set(initialize=jobs), pyo.Set(initialize=types), pyo.Set(initialize=nodes)
    model.JT = pyo.Set(dimen=2, initialize=[(j, t) for j in jobs for t in range(1, len(st.tiers[j]))])
    model.S = pyo.Set(initialize=[j for j in jobs if st.current[j] is not None])

    model.x = pyo.Var(model.J, model.K, domain=pyo.NonNegativeIntegers, bounds=lambda _, j, k: (0, st.bound(j, k)))
    model.y = pyo.Var(model.J, model.N, domain=pyo.Binary)
    model.z = pyo.Var(model.JT, domain=pyo.Binary)
    model.m = pyo.Var(model.J, domain=pyo.Binary, bounds=lambda _, j: (float(st.spans(j)), 1))
    model.p = pyo.Var(model.J, domain=pyo.NonNegativeReals, bounds=lambda _, j: (0, 1 / st.tiers[j][0]))
    model.s = pyo.Var(model.S, domain=pyo.Binary)
    x, y, z, m, p, s = model.x, model.y, model.z, model.m, model.p, model.s

    def inverse_worst(j: int):
        """1/tau_j0 + sum_t d_jt z_jt: 1 / the worst slowdown of job j's GPUs, telescoped."""
        return 1 / st.tiers[j][0] + sum(float(d) * z[j, t] for t, d in enumerate(st.gain(j), start=1))

    def cap(_, k: int):  # with no jobs there is nothing to bound
        return sum(x[j, k] for j in jobs) <= int(st.cap[k]) if pi.jobs else pyo.Constraint.Skip

    model.place = pyo.Constraint(model.J, rule=lambda _, j: sum(x[j, k] for k in types) == int(st.need[j]))
    model.cap = pyo.Constraint(model.K, rule=cap)
    model.node = pyo.Constraint(model.J, model.K, rule=lambda _, j, k: x[j, k] <= st.bound(j, k) * y[j, st.node_of[k]])
    model.tier_index = pyo.Set(dimen=2, initialize=[(j, k) for j in jobs for k in types if st.tier_of[j][k] >= 1])
    model.tier = pyo.Constraint(model.tier_index,
                                rule=lambda _, j, k: x[j, k] <= st.bound(j, k) * z[j, int(st.tier_of[j][k])])
    model.order_index = pyo.Set(dimen=2, initialize=[(j, t) for j, t in model.JT if t >= 2])
    model.order = pyo.Constraint(model.order_index, rule=lambda _, j, t: z[j, t] <= z[j, t - 1])
    model.spread = pyo.Constraint(model.J, rule=lambda _, j: sum(y[j, n] for n in nodes) <= 1 + st.spread_max(j) * m[j])
    model.onenode_index = pyo.Set(dimen=2, initialize=[(j, n) for j in jobs if not st.spans(j) for n in nodes])
    model.onenode = pyo.Constraint(model.onenode_index, rule=lambda _, j, n: sum(
        x[j, k] for k in st.on_node(n)) >= int(st.need[j]) * (y[j, n] - m[j]))
    model.lost = pyo.Constraint(model.J, rule=lambda _, j: p[j] >= inverse_worst(j) - (1 - m[j]) / st.tiers[j][0])
    model.stay_index = pyo.Set(dimen=2, initialize=[(j, k) for j in model.S for k in st.current[j]])
    model.stay = pyo.Constraint(model.stay_index, rule=lambda _, j, k: x[j, k] >= st.current[j][k] * s[j])

    speed = sum(weight[j] * (inverse_worst(j) - (1 - 1 / pi.across_node) * p[j]) for j in jobs)
    restart = sum(weight[j] * pi.restart_penalty * (1 - (s[j] if j in model.S else 0))
                  for j in jobs if pi.jobs[j].current_gpus)
    model.obj = pyo.Objective(expr=speed - restart, sense=pyo.maximize)
    model.columns = [v for j in jobs for v in (
        *(x[j, k] for k in types), *(y[j, n] for n in nodes), *(z[j, t] for t in range(1, len(st.tiers[j]))),
        m[j], p[j], *((s[j],) if j in model.S else ()))]
    return model


def point(pi: PlacementInput, model: PlacementModel, placement: Mapping[str, tuple[str, ...]]) -> np.ndarray:
    """The model's column values for a concrete placement (a warm start, e.g. PAL's greedy)."""
    v = np.zeros(model.arrays.num_cols)
    type_of = _type_of(model.types)
    for job, cols in zip(pi.jobs, model.jobs):
        gpu_ids = placement[job.id]
        for g in gpu_ids:
            v[cols.x[type_of[g]]] += 1
        used = {pi.gpu_index[g].node for g in gpu_ids}
        for n, c in zip(model.nodes, cols.y):
            v[c] = float(n in used)
        worst = max(pi.gpu_index[g].slowdown[job.app_class] for g in gpu_ids)
        for t, c in enumerate(cols.z, start=1):
            v[c] = float(round(worst, 9) >= cols.tiers[t])
        v[cols.m] = float(len(used) > 1)
        v[cols.p] = v[cols.m] / worst
        if cols.s >= 0:
            v[cols.s] = float(not moved(job, gpu_ids))
    return v


def _type_of(types) -> dict[str, int]:
    return {g: k for k, ids in enumerate(types) for g in ids}


def _current_counts(job: PlacementJob, type_of: dict[str, int]) -> dict[int, int] | None:
    """Type -> current GPUs of a running job, if it could stay (all its GPUs offered)."""
    if not job.current_gpus or len(job.current_gpus) != job.num_gpus:
        return None
    if any(g not in type_of for g in job.current_gpus):
        return None
    return dict(Counter(type_of[g] for g in job.current_gpus))


def decode(pi: PlacementInput, model: PlacementModel, values: np.ndarray) -> dict[str, tuple[str, ...]]:
    """Counts per type -> concrete GPUs: a job keeps its current GPUs where its counts allow."""
    free = [list(ids) for ids in model.types]
    counts = {(j, k): int(round(values[c])) for (j, k), c in model.x_cols.items()}
    taken: dict[int, list[str]] = {j: [] for j in range(len(pi.jobs))}
    for j, job in enumerate(pi.jobs):  # current GPUs first, so a job that can stay does
        for k, ids in enumerate(free):
            keep = [g for g in job.current_gpus if g in ids][: counts[(j, k)]]
            for g in keep:
                ids.remove(g)
            taken[j] += keep
            counts[(j, k)] -= len(keep)
    for (j, k), n in counts.items():
        taken[j] += free[k][:n]
        del free[k][:n]
    return {job.id: tuple(sorted(taken[j])) for j, job in enumerate(pi.jobs)}


@dataclass(frozen=True)
class PlacementResult:
    placement: dict[str, tuple[str, ...]]
    objective: float
    status: str
    build_s: float
    solve_s: float


EXACT_MAX_GPUS = 128  # larger placements are solved a window at a time (placement_windows)


def solve_placement(pi: PlacementInput, solver: str = "highs", time_limit_s: float = 10.0,
                    mip_gap: float = 1e-6, start: Mapping[str, tuple[str, ...]] | None = None) -> PlacementResult:
    """The exact placement (an array solver of the registry: highs, cpsat or portfolio),
    warm-started from `start` (a placement, e.g. PAL's greedy) if given: under a time limit the
    answer is then never worse than the start. Above EXACT_MAX_GPUS GPUs the model is solved one
    window of nodes at a time around the start (PAL's greedy if none given): placement_windows."""
    if not pi.jobs:
        return PlacementResult({}, 0.0, "optimal", 0.0, 0.0)
    if len(pi.gpus) <= EXACT_MAX_GPUS:
        return _solve_exact(pi, solver, time_limit_s, mip_gap, start)
    from schedlab.formulations.placement_windows import search_windows

    t0 = time.perf_counter()
    start = start if start is not None else pal_greedy(pi, np.random.default_rng(0))
    found = search_windows(pi, start, time_limit_s, lambda sub, left_s, sub_start: _solve_exact(
        sub, solver, left_s, mip_gap, sub_start).placement)
    return PlacementResult(found.placement, placement_objective(pi, found.placement), TIME_LIMIT, 0.0,
                           time.perf_counter() - t0)


def _solve_exact(pi: PlacementInput, solver: str, time_limit_s: float, mip_gap: float,
                 start: Mapping[str, tuple[str, ...]] | None) -> PlacementResult:
    from schedlab.solvers.registry import array_solver

    if not pi.jobs:
        return PlacementResult({}, 0.0, "optimal", 0.0, 0.0)
    t0 = time.perf_counter()
    model = build(pi)
    if start is not None:
        model = replace(model, arrays=replace(model.arrays, start=point(pi, model, start)))
    build_s = time.perf_counter() - t0
    outcome = array_solver(solver)(model.arrays, max(time_limit_s - build_s, 1e-3), mip_gap)
    if outcome.status == FAILED:
        if start is None:
            raise RuntimeError(f"placement: {solver} found no placement ({outcome.message})")
        # Out of time before a first point (CP-SAT can be, even with the start as its hint): the
        # start is a valid placement, so it is the answer, flagged as unproven.
        placement = {job.id: tuple(sorted(start[job.id])) for job in pi.jobs}
        return PlacementResult(placement, placement_objective(pi, placement), TIME_LIMIT, build_s, outcome.solve_s)
    placement = decode(pi, model, outcome.values)
    return PlacementResult(placement, placement_objective(pi, placement), outcome.status, build_s, outcome.solve_s)


def gang_size(job: JobSpec) -> int:
    """G_j: the GPUs the placement gives a job, its requested_gpus, else min_gpus."""
    return job.requested_gpus or job.min_gpus


def gpu_key(ref: GpuRef) -> str:
    """A cluster GPU's id in the PlacementInput of its round."""
    return f"{ref.node}/{ref.gpu}"


def restarted(job: JobSpec, gpus: tuple[GpuRef, ...]) -> bool:
    """A running job restarts when its GPUs change."""
    return bool(job.current_gpus) and set(gpus) != set(job.current_gpus)


def submitted_batch(job: JobSpec, num_gpus: int) -> tuple[int, int, int]:
    """(total, micro-batch, accumulation steps) of a job training at the batch it submitted
    (fixed_bsz, else requested_bsz, else init_bsz) on `num_gpus` GPUs."""
    micro, accum = split_fixed_batch(job.fixed_bsz or job.requested_bsz or job.batch.init_bsz, num_gpus, job.batch)
    return num_gpus * micro * (accum + 1), micro, accum


def _problems(ri: RoundInput) -> list[str]:
    """Why the placement formulation cannot take this round (empty: it can)."""
    found = []
    kinds = sorted({n.gpu_type for n in ri.cluster.nodes})
    if len(kinds) > 1:
        found.append(f"cluster.nodes: GPU types {kinds}; the placement formulation takes a cluster of one GPU "
                     "type (use the goodput or joint formulation)")
    for i, job in enumerate(ri.jobs):
        size, lo = gang_size(job), max(job.min_gpus, 1)
        if not lo <= size <= job.max_gpus:
            found.append(f"jobs[{i}].requested_gpus: the placement formulation places job {job.id!r} on exactly "
                         f"{size} GPUs (requested_gpus, else min_gpus), outside its [{lo}, {job.max_gpus}]; set "
                         "requested_gpus within it")
            continue
        _, micro, _ = submitted_batch(job, size)
        if not job.batch.min_local_bsz <= micro <= job.batch.max_local_bsz:
            found.append(f"jobs[{i}]: its batch on {size} GPUs is {micro} per GPU, outside [{job.batch.min_local_bsz}, "
                         f"{job.batch.max_local_bsz}]; change requested_gpus or its batch")
    need, total = sum(gang_size(j) for j in ri.jobs), ri.cluster.total_gpus
    if need > total:
        found.append(f"jobs: they need {need} GPUs, the cluster has {total}; the placement formulation places every "
                     "job it is given, so give it fewer jobs (a policy chooses which run: policies.placement)")
    return found


@dataclass(frozen=True)
class PlacementView:
    """A round as PAL's placement sees it: `pi` holds every GPU of the cluster (id gpu_key(ref))
    and every job on gang_size(job) GPUs; `refs` maps the GPU ids back."""

    round_input: RoundInput
    pi: PlacementInput
    refs: Mapping[str, GpuRef]

    def allocations(self, placement: Mapping[str, tuple[str, ...]]) -> tuple[JobAllocation, ...]:
        """Every job's allocation: its placed GPUs sorted, its submitted batch, its speed."""
        out = []
        for job, pjob in zip(self.round_input.jobs, self.pi.jobs):
            gpus = tuple(sorted(self.refs[g] for g in placement[job.id]))
            total, micro, accum = submitted_batch(job, len(gpus))
            speed = job_speed(self.pi, pjob, placement[job.id])
            out.append(JobAllocation(job.id, gpus, total, micro, accum, speedup=speed, restarted=restarted(job, gpus)))
        return tuple(out)


def placement_view(ri: RoundInput) -> PlacementView:
    """The round's PlacementInput (module docstring); InputError if the formulation cannot take it."""
    found = _problems(ri)
    if found:
        raise InputError(found)
    classes = sorted({job.variability_class for job in ri.jobs})
    refs = {gpu_key(ref): ref for ref in (GpuRef(n.id, k) for n in ri.cluster.nodes for k in range(n.gpus))}
    nodes = {n.id: n for n in ri.cluster.nodes}
    gpus = tuple(PlacementGpu(key, ref.node, {c: nodes[ref.node].gpu_slowdown(ref.gpu, c) for c in classes})
                 for key, ref in refs.items())
    jobs = tuple(PlacementJob(job.id, gang_size(job), job.variability_class, tuple(map(gpu_key, job.current_gpus)))
                 for job in ri.jobs)
    topology = ri.cluster.topology
    across_node = topology.across_node_factor if topology is not None else 1.0
    return PlacementView(ri, PlacementInput(gpus, jobs, across_node, restart_penalty=0.0), refs)


@dataclass(frozen=True)
class PlacementRoundModel:
    """The placement model of a round (formulations.base.RoundModel); `greedy` is PAL's greedy
    placement, its warm start and its fallback."""

    view: PlacementView
    model: PlacementModel
    greedy: Mapping[str, tuple[str, ...]]

    @property
    def round_input(self) -> RoundInput:
        return self.view.round_input

    def arrays(self) -> MilpArrays:
        return replace(self.model.arrays, start=self.start())

    def pyomo(self) -> pyo.ConcreteModel:
        return build_pyomo(self.view.pi)

    def start(self) -> np.ndarray:
        return point(self.view.pi, self.model, self.greedy)

    def decode(self, values: np.ndarray) -> tuple[JobAllocation, ...]:
        return self.view.allocations(decode(self.view.pi, self.model, values))

    def objective(self, values: np.ndarray) -> float:
        """The objective of the placement the point decodes to (every job's speed)."""
        return placement_objective(self.view.pi, decode(self.view.pi, self.model, values))

    def fallback(self) -> np.ndarray:
        return self.start()


def placement_model(round_input: RoundInput) -> PlacementRoundModel:
    """PAL's exact placement of every job of the round on its gang_size GPUs (module docstring)."""
    view = placement_view(round_input)
    greedy = pal_greedy(view.pi, np.random.default_rng(round_input.settings.seed))
    return PlacementRoundModel(view, build(view.pi), greedy)
