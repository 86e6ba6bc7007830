"""Variability-aware placement (PAL, Jain et al. SC'24) as an exact MILP over GPU types.

The jobs chosen to run this round (gang-scheduled: job j needs exactly G_j GPUs) are placed on
concrete GPUs, trading each job's slowest GPU against the spread of its GPUs over nodes.

Sets
  J jobs; N nodes; K GPU types: GPUs on the same node with the same slowdown for every
  application class in play (interchangeable, so counted, not named); T_j = the distinct
  slowdowns tau_j0 < tau_j1 < ... of job j's class on the GPUs offered (its tiers).
Parameters
  G_j GPUs of job j; w_j its weight; cap_k GPUs of type k, on node n(k), with tier t_j(k) for
  job j; L the across-node locality factor (PAL's simulator: 1.7); rho_j the restart penalty
  (fraction of a round) of moving running job j; cur_jk its current GPUs of type k.
Variables
  x_jk in {0..min(cap_k, G_j)}   GPUs of type k given to job j
  y_jn in {0,1}                 job j uses node n
  z_jt in {0,1}, t >= 1         job j uses a GPU of tier >= t (ordered tier binaries)
  m_j  in {0,1}                 job j spans more than one node
  p_j  >= 0                     = m_j * (1 / tau_worst), the part of the speed lost to spread
  s_j  in {0,1}                 running job j keeps exactly its GPUs (only for running jobs)
Objective (maximize weighted job speed, speed = 1 / (worst slowdown x locality factor))
  sum_j w_j [ 1/tau_j0 + sum_{t>=1} d_jt z_jt - (1 - 1/L) p_j ] - sum_j w_j rho_j (1 - s_j)
  with d_jt = 1/tau_jt - 1/tau_j(t-1) < 0: the telescoped 1/tau_worst, exact because z_j. is
  monotone and pushed down by the objective, up by the linking rows.
Constraints
  sum_k x_jk = G_j                                         every chosen job placed whole
  sum_j x_jk <= cap_k                                      capacity per type
  x_jk <= min(cap_k, G_j) y_j,n(k)                        nodes used
  x_jk <= min(cap_k, G_j) z_j,t_j(k)     (t_j(k) >= 1)   tiers used
  z_j,t+1 <= z_jt                                          ordered tiers
  sum_n y_jn <= 1 + (min(|N|, G_j) - 1) m_j               spread (G_j GPUs span <= G_j nodes)
  sum_{k on n} x_jk >= G_j (y_jn - m_j)                    one node unless spread (G_j <= the
                                                           largest node; valid, and without it
                                                           the LP spreads a job for ~1/|N| of m)
  p_j >= 1/tau_j0 + sum_t d_jt z_jt - (1/tau_j0)(1 - m_j) p's lower bound (it is penalized)
  x_jk >= cur_jk s_j                                       staying keeps the current GPUs
What we changed from PAL: PAL places greedily (schedlab.policies.placement.pal_greedy); this
is the exact model of the same trade-off. Locality is counted per node (PAL's simulator has
one across-node factor); moving a job costs rho_j of its weight, PAL's "same GPUs, no restart".
Solved by HiGHS (solvers.highs_direct) or, from the same arrays, by CP-SAT (solvers.cpsat).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import numpy as np
import scipy.sparse as sp

from schedlab.errors import InputError
from schedlab.solvers.arrays import MilpArrays
from schedlab.solvers.outcome import FAILED, TIME_LIMIT


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


def gpu_types(pi: PlacementInput) -> list[tuple[str, ...]]:
    """GPUs grouped by node and slowdown for every class in play (interchangeable GPUs)."""
    classes = sorted({j.app_class for j in pi.jobs})
    groups: dict[tuple, list[str]] = {}
    for g in pi.gpus:
        groups.setdefault((g.node, *(round(g.slowdown[c], 9) for c in classes)), []).append(g.id)
    return [tuple(ids) for ids in groups.values()]


def build(pi: PlacementInput) -> PlacementModel:
    types = gpu_types(pi)
    cap = np.array([len(t) for t in types])
    nodes = sorted({pi.gpu_index[t[0]].node for t in types})
    node_of = np.array([nodes.index(pi.gpu_index[t[0]].node) for t in types])
    largest_node_gpus = np.bincount(node_of, weights=cap, minlength=len(nodes)).max()
    type_of = _type_of(types)
    cols: list[tuple[float, float, float, bool]] = []  # (c, lo, hi, integer)
    rows: list[tuple[dict[int, float], float, float]] = []

    def col(c: float, hi: float, integer: bool = True) -> int:
        cols.append((c, 0.0, hi, integer))
        return len(cols) - 1

    job_cols: list[JobColumns] = []
    offset = 0.0
    for j, job in enumerate(pi.jobs):
        tau_k = np.array([pi.gpu_index[t[0]].slowdown[job.app_class] for t in types])
        tiers = np.unique(np.round(tau_k, 9))
        tier_of = np.searchsorted(tiers, np.round(tau_k, 9))
        d = 1 / tiers[1:] - 1 / tiers[:-1]
        w, inv0 = job.weight, 1 / tiers[0]
        offset += w * inv0
        x = [col(0.0, min(cap[k], job.num_gpus)) for k in range(len(types))]
        y = [col(0.0, 1) for _ in nodes]
        z = [col(w * d[t - 1], 1) for t in range(1, len(tiers))]  # z[t-1] is tier t
        m = col(0.0, 1)
        if job.num_gpus > largest_node_gpus:  # no node holds it: it spans nodes
            cols[m] = (0.0, 1.0, 1.0, True)
        p = col(-w * (1 - 1 / pi.across_node), inv0, integer=False)
        rows.append(({x[k]: 1.0 for k in range(len(types))}, job.num_gpus, job.num_gpus))
        for k in range(len(types)):
            big = float(min(cap[k], job.num_gpus))
            rows.append(({x[k]: 1.0, y[node_of[k]]: -big}, -np.inf, 0.0))
            if tier_of[k] >= 1:
                rows.append(({x[k]: 1.0, z[tier_of[k] - 1]: -big}, -np.inf, 0.0))
        for t in range(1, len(z)):
            rows.append(({z[t]: 1.0, z[t - 1]: -1.0}, -np.inf, 0.0))
        spread_max = min(len(nodes), job.num_gpus) - 1.0  # a job of G GPUs spans at most G nodes
        rows.append(({**{yn: 1.0 for yn in y}, m: -spread_max}, -np.inf, 1.0))
        if job.num_gpus <= largest_node_gpus:  # one node unless spread
            for n_idx, yn in enumerate(y):
                on_node = np.flatnonzero(node_of == n_idx)
                rows.append(({**{x[k]: 1.0 for k in on_node}, yn: -float(job.num_gpus), m: float(job.num_gpus)},
                             0.0, np.inf))
        rows.append(({p: 1.0, **{z[t]: -d[t] for t in range(len(z))}, m: -inv0}, 0.0, np.inf))
        current = _current_counts(job, type_of)
        s = -1
        if current is not None:
            offset -= w * pi.restart_penalty
            s = col(w * pi.restart_penalty, 1)
            for k, count in current.items():
                rows.append(({x[k]: 1.0, s: -float(count)}, 0.0, np.inf))
        job_cols.append(JobColumns(tuple(x), tuple(y), tuple(z), m, p, s, tuple(tiers)))
    for k in range(len(types)):
        rows.append(({cols_j.x[k]: 1.0 for cols_j in job_cols}, -np.inf, float(cap[k])))
    c, lo, hi, integer = (np.array(v) for v in zip(*cols)) if cols else (np.zeros(0),) * 4
    data, indices, indptr = [], [], [0]
    for coefs, _, _ in rows:
        indices += list(coefs)
        data += list(coefs.values())
        indptr.append(len(indices))
    A = sp.csr_matrix((data, indices, indptr), shape=(len(rows), len(cols)))
    arrays = MilpArrays(c.astype(float), offset, A, np.array([r[1] for r in rows], float),
                        np.array([r[2] for r in rows], float), lo.astype(float), hi.astype(float), integer.astype(bool))
    return PlacementModel(arrays, tuple(types), tuple(nodes), tuple(job_cols))


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


def solve_placement(pi: PlacementInput, solver: str = "highs", time_limit_s: float = 10.0,
                    mip_gap: float = 1e-6, start: Mapping[str, tuple[str, ...]] | None = None) -> PlacementResult:
    """The exact placement (HiGHS or CP-SAT on the same arrays), warm-started from `start`
    (a placement, e.g. PAL's greedy) if given: under a time limit the answer is then never
    worse than the start."""
    from schedlab.solvers.cpsat import solve_cpsat
    from schedlab.solvers.highs_direct import solve_highs

    if not pi.jobs:
        return PlacementResult({}, 0.0, "optimal", 0.0, 0.0)
    t0 = time.perf_counter()
    model = build(pi)
    if start is not None:
        model = replace(model, arrays=replace(model.arrays, start=point(pi, model, start)))
    build_s = time.perf_counter() - t0
    run = {"highs": solve_highs, "cpsat": solve_cpsat}[solver]
    outcome = run(model.arrays, time_limit_s, mip_gap)
    if outcome.status == FAILED:
        if start is None:
            raise RuntimeError(f"placement: {solver} found no placement ({outcome.message})")
        # Out of time before a first point (CP-SAT can be, even with the start as its hint): the
        # start is a valid placement, so it is the answer, flagged as unproven.
        placement = {job.id: tuple(sorted(start[job.id])) for job in pi.jobs}
        return PlacementResult(placement, placement_objective(pi, placement), TIME_LIMIT, build_s, outcome.solve_s)
    placement = decode(pi, model, outcome.values)
    return PlacementResult(placement, placement_objective(pi, placement), outcome.status, build_s, outcome.solve_s)
