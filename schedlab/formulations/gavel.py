r"""Gavel's heterogeneity-aware policies: one LP each over the time fractions of jobs on GPU types.

Follows Gavel (Narayanan et al., OSDI'20, sections 3-4, and its code,
stanford-futuredata/gavel, scheduler/policies/): an allocation $X_{jt}$ is the fraction of
wall-clock time job $j$ runs on GPU type $t$; a job's effective throughput is
$\sum_t T_{jt} X_{jt}$; each policy is one LP over $X$. A round mechanism (schedlab.policies.gavel)
realizes $X$ round by round. Every policy here is one model, the ratio max-min:

**Sets**

- $J$ jobs; $Tp$ GPU types; $J^+ \subseteq J$ the jobs that count (below)

**Parameters**

- $T_{jt}$ steps per second of job $j$'s gang on type $t$, consolidated (0: it cannot run there)
- $s_j$ the job's scale factor: the GPUs of its gang; $w_j$ its priority weight (Gavel's)
- $n_t$ GPUs of type $t$; $N = \sum_t n_t$
- $a_{jt}$ the job's rate per unit of time on $t$ and $b_j$ what it is owed, by policy:

$$
\begin{aligned}
\text{LAS, heterogeneity-aware:} &\quad a_{jt} = \frac{s_j \, T_{jt}}{w_j \, E_j}, \quad
    E_j = \sum_t T_{jt} \, \frac{n_t}{N}, \quad b_j = 1 \\
\text{LAS, agnostic:} &\quad \text{the same with } T_{jt} \text{ replaced by } [T_{jt} > 0] \\
\text{makespan:} &\quad a_{jt} = T_{jt}, \quad b_j = R_j \text{ (steps left)} \\
\text{finish-time fairness at } \rho: &\quad a_{jt} = T_{jt}, \quad
    b_j = \frac{R_j}{\rho \, D_j - e_j}, \quad D_j = c_j + \frac{R_j}{I_j}
\end{aligned}
$$

$E_j$ is Gavel's equal-share throughput (its ProportionalPolicy: time on each type in proportion
to the type's GPUs); $s_j$ counts a gang's GPU-time, so a job of 4 GPUs at the same throughput
owes the cluster 4 times the time of a job of 1. $J^+$: LAS counts the jobs that can run on some
type ($\max_t a_{jt} > 0$), makespan and finish-time fairness those with steps left ($R_j > 0$,
known).

Finish-time fairness (Themis, Mahajan et al., NSDI'20; Gavel's FinishTimeFairnessPolicyWithPerf)
minimizes the largest $\rho_j = (e_j + R_j / y_j) / D_j$, the job's finish time at its rate
$y_j = \sum_t T_{jt} X_{jt}$ over its finish time had it run alone on $1/|J|$ of the cluster:
$e_j$ seconds since it arrived, $c_j$ the seconds its progress so far would have taken alone, $I_j$
its throughput alone (Gavel's IsolatedPolicy: $X_{jt} = n_t [T_{jt} > 0] / (|J| s_j)$, each row
scaled down to sum at most 1). $\rho_j \le \rho$ is $y_j \ge R_j / (\rho D_j - e_j)$, linear for
a fixed $\rho$: the model at $\rho$ is feasible iff its $z^* \ge 1$, which grows with $\rho$, so
`finish_time_fairness` bisects on $\rho$ between $\max_j (e_j + R_j / \max_t T_{jt}) / D_j$ (every
job alone on its best type) and $\max_j (e_j + R_j / I_j) / D_j$ (the isolated allocation, feasible)
and runs stage 2 at the smallest feasible $\rho$ it found with $z^* = 1$.

**Variables**

- $X_{jt} \ge 0$ time fractions; $z \ge 0$ the smallest $\sum_t a_{jt} X_{jt} / b_j$ (first stage)

**Objective**

$$
\text{stage 1:} \quad \max \; z \qquad\qquad
\text{stage 2:} \quad \max \; \sum_{j \in J^+} \frac{1}{b_j} \sum_t a_{jt} X_{jt}
$$

**Constraints**

$$
\begin{aligned}
&\text{(fair)}  && b_j \, z \le \sum_t a_{jt} X_{jt}                  && j \in J^+ \text{ (stage 1)} \\
&\text{(floor)} && b_j \, z^* \le \sum_t a_{jt} X_{jt}                && j \in J^+ \text{ (stage 2)} \\
&\text{(time)}  && \sum_t X_{jt} \le 1                                  && j \in J \\
&\text{(cap)}   && \sum_j s_j \, X_{jt} \le n_t                         && t \in Tp \\
&\text{(runs)}  && X_{jt} = 0                                           && T_{jt} = 0
\end{aligned}
$$

with $0 \le z \le \max_{j \in J^+} \max_t a_{jt} / b_j$ (a bound (time) implies), so every
model is bounded. LAS's $z$ is the smallest share of its equal share any job gets (1: every job
runs as fast as on its equal share); makespan's $z$ is the inverse of the time by which the last job
would finish at these rates (Gavel's MinTotalDuration), so the makespan is $1 / z$.

**What we changed.** Gavel's makespan bisects on the finish time with an LP per step; here
$z = 1 / \text{makespan}$ makes it one LP. Stage 2 (ours) spends the capacity the minimum does
not need, every job keeping at least its stage-1 rate $z^*$ ((floor)); Gavel leaves it to its
round mechanism, which runs jobs of priority 0 on GPUs left idle. Jobs that cannot run
anywhere do not pin $z$ at 0 (Gavel's table has every job on every type), nor do they take
time in the isolated allocation on types they cannot use. The (runs) rows are column bounds.
Gavel's finish-time fairness is one convex program (cvxpy, ECOS); here a bisection of LPs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from schedlab.errors import InputError
from schedlab.milp import MilpArrays, Rows, stack_rows
from schedlab.models.efficiency import split_fixed_batch
from schedlab.models.throughput import step_time_s
from schedlab.state import BatchLimits, JobSpec, RoundInput, ThroughputParams

if TYPE_CHECKING:
    import pyomo.environ as pyo

__all__ = ["GavelInput", "MaxMinLP", "equal_share_throughput", "gang_steps_per_s", "gavel_input", "las_agnostic_lp",
           "las_lp", "makespan_lp", "finish_time_fairness", "ftf_lp", "isolated_throughput"]


@dataclass(frozen=True)
class GavelInput:
    """What Gavel's LPs read of a round, as arrays (the module docstring's parameters).

    Attributes
    ----------
    throughput : ndarray, shape (jobs, types)
        T_jt, steps per second of the job's gang on type t (0: it cannot run there).
    scale : ndarray, shape (jobs,)
        s_j, the GPUs of the job's gang.
    weight : ndarray, shape (jobs,)
        w_j, the job's priority weight (1: Gavel's default).
    capacity_gpus : ndarray, shape (types,)
        n_t, the GPUs of each type.
    remaining_steps : ndarray, shape (jobs,), optional
        R_j, the steps each job has left (makespan); NaN where unknown, None where no job's is known.
    job_ids, gpu_types : tuple of str
        The rows' jobs and the columns' types.
    """

    throughput: np.ndarray
    scale: np.ndarray
    weight: np.ndarray
    capacity_gpus: np.ndarray
    job_ids: tuple[str, ...]
    gpu_types: tuple[str, ...]
    remaining_steps: np.ndarray | None = None

    def __post_init__(self):
        J, Tn = self.throughput.shape
        shapes = [(self.scale.shape, (J,)), (self.weight.shape, (J,)), (self.capacity_gpus.shape, (Tn,)),
                  (len(self.job_ids), J), (len(self.gpu_types), Tn)]
        if self.remaining_steps is not None:
            shapes.append((self.remaining_steps.shape, (J,)))
        if any(got != want for got, want in shapes):
            raise InputError([f"Gavel input: the arrays' shapes disagree with {J} jobs x {Tn} GPU types"])

    @property
    def num_jobs(self) -> int:
        """|J|."""
        return self.throughput.shape[0]

    @property
    def num_types(self) -> int:
        """|Tp|."""
        return self.throughput.shape[1]


def gang_steps_per_s(job: JobSpec, gpu_type: str, gpus_per_node: int, capacity_gpus: int) -> float:
    """T_jt: optimizer steps per second of the job's gang (JobSpec.gang_gpus GPUs) at its submitted
    batch on GPUs of `gpu_type`, consolidated (the fewest nodes of `gpus_per_node` GPUs); 0 where
    the job has no throughput model of that type, its gang exceeds the type's `capacity_gpus`, or
    its batch does not split over its gang within the per-GPU range (BatchLimits)."""
    params = job.throughput.get(gpu_type)
    if params is None or job.gang_gpus > capacity_gpus:
        return 0.0
    return _steps_per_s(params, job.batch, job.submitted_bsz, math.ceil(job.gang_gpus / gpus_per_node), job.gang_gpus)


@lru_cache(maxsize=1 << 16)  # every round asks again for the same jobs on the same types
def _steps_per_s(params: ThroughputParams, batch: BatchLimits, submitted_bsz: int, num_nodes: int, r: int) -> float:
    """Steps per second at the submitted batch on r GPUs over num_nodes nodes; 0 where the batch
    does not split over r GPUs within the per-GPU range."""
    micro, accum = split_fixed_batch(submitted_bsz, r, batch)
    if not batch.min_local_bsz <= micro <= batch.max_local_bsz:
        return 0.0
    return float(1.0 / step_time_s(params, num_nodes, r, micro, accum))


def gavel_input(round_input: RoundInput) -> GavelInput:
    """The round's jobs as Gavel's LPs see them: T_jt by `gang_steps_per_s` on each GPU type of
    the cluster (types in sorted order, each valued on its largest node), s_j = gang_gpus,
    w_j = 1, R_j = JobSpec.remaining_steps (NaN where unknown)."""
    nodes = round_input.cluster.nodes
    types = tuple(sorted({n.gpu_type for n in nodes}))
    capacity = np.array([sum(n.gpus for n in nodes if n.gpu_type == t) for t in types], dtype=float)
    per_node = [max(n.gpus for n in nodes if n.gpu_type == t) for t in types]
    jobs = round_input.jobs
    T = np.array([[gang_steps_per_s(job, t, g, int(c)) for t, g, c in zip(types, per_node, capacity)] for job in jobs],
                 dtype=float).reshape(len(jobs), len(types))
    remaining = np.array([math.nan if job.remaining_steps is None else job.remaining_steps for job in jobs], dtype=float)
    return GavelInput(throughput=T, scale=np.array([job.gang_gpus for job in jobs], dtype=float),
                      weight=np.ones(len(jobs)), capacity_gpus=capacity, job_ids=tuple(job.id for job in jobs),
                      gpu_types=types, remaining_steps=remaining)


def equal_share_throughput(inp: GavelInput) -> np.ndarray:
    """E_j = sum_t T_jt n_t / N: each job's throughput on its equal share (Gavel's ProportionalPolicy)."""
    return inp.throughput @ (inp.capacity_gpus / max(inp.capacity_gpus.sum(), 1.0))


@dataclass(frozen=True)
class MaxMinLP:
    """The module docstring's model over given a_jt and b_j: stage 1 (`floor` None) maximizes z,
    stage 2 (`floor` z*) the total rate with every job at z* or more. A schedlab.milp.MilpModel
    (continuous columns), so any solver of the registry solves it.

    Columns: X in row-major (job, type) order, then z in stage 1.
    """

    inp: GavelInput
    rate: np.ndarray  # a_jt
    owed: np.ndarray  # b_j
    counted: np.ndarray  # J+, a boolean mask over jobs
    floor: float | None = None

    @property
    def num_x(self) -> int:
        """Columns of X: |J| |Tp|."""
        return self.inp.num_jobs * self.inp.num_types

    def z_upper(self) -> float:
        """The bound of z: max over J+ of max_t a_jt / b_j (0 without a job in J+)."""
        if not self.counted.any():
            return 0.0
        return float((self.rate[self.counted].max(axis=1) / self.owed[self.counted]).max())

    def second_stage(self, z: float) -> MaxMinLP:
        """Stage 2 at the first stage's optimum `z`: z* a relative 1e-7 below it, so that the
        first stage's point stays feasible within the solvers' tolerances."""
        return replace(self, floor=z * (1.0 - 1e-7))

    def arrays(self) -> MilpArrays:
        """The model as arrays, columns X (row-major) then z (stage 1)."""
        J, Tn = self.inp.num_jobs, self.inp.num_types
        n = self.num_x
        stage1 = self.floor is None
        num_cols = n + (1 if stage1 else 0)
        x_col = np.arange(n).reshape(J, Tn)
        counted = np.flatnonzero(self.counted)
        fair, time_rows, cap = Rows(), Rows(), Rows()
        rows = np.repeat(np.arange(len(counted)), Tn)
        cols, vals = x_col[counted].ravel(), self.rate[counted].ravel()
        if stage1:  # (fair): b_j z - a_j . X_j <= 0
            fair.extend([("fair", j) for j in counted.tolist()], np.concatenate([np.arange(len(counted)), rows]),
                        np.concatenate([np.full(len(counted), n), cols]), np.concatenate([self.owed[counted], -vals]),
                        -math.inf, 0.0)
        else:  # (floor): -a_j . X_j <= -b_j z*
            fair.extend([("floor", j) for j in counted.tolist()], rows, cols, -vals, -math.inf,
                        -self.owed[counted] * self.floor)
        time_rows.extend([("time", j) for j in range(J)], np.repeat(np.arange(J), Tn), x_col.ravel(), np.ones(n),
                         -math.inf, 1.0)  # (time)
        cap.extend([("cap", t) for t in range(Tn)], np.tile(np.arange(Tn), J), x_col.ravel(),
                   np.repeat(self.inp.scale, Tn), -math.inf, self.inp.capacity_gpus)  # (cap)
        A, row_lo, row_hi = stack_rows([fair, time_rows, cap], num_cols)
        c = np.zeros(num_cols)
        col_hi = np.zeros(num_cols)
        col_hi[:n] = (self.inp.throughput > 0).ravel()  # (runs)
        if stage1:
            c[n] = 1.0
            col_hi[n] = self.z_upper()
        else:
            c[:n] = (self.rate * np.where(self.counted, 1.0 / np.maximum(self.owed, 1e-300), 0.0)[:, None]).ravel()
        return MilpArrays(c=c, offset=0.0, A=A, row_lo=row_lo, row_hi=row_hi, col_lo=np.zeros(num_cols), col_hi=col_hi,
                          integer=np.zeros(num_cols, dtype=bool), start=self.start())

    def start(self) -> np.ndarray | None:
        """Nothing runs (z = 0): feasible in stage 1; stage 2 has none known."""
        return np.zeros(self.num_x + 1) if self.floor is None else None

    def pyomo(self) -> pyo.ConcreteModel:
        """The same model in Pyomo, term by term as in the module docstring, indexed by job id
        and GPU type: X[job, type], (fair)/(floor) and (time) by job, (cap) by type."""
        import pyomo.environ as pyo  # here, not at the top: rounds solved from arrays never load Pyomo

        inp = self.inp
        m = pyo.ConcreteModel(name="gavel")
        m.J = pyo.Set(initialize=inp.job_ids, ordered=True)
        m.Tp = pyo.Set(initialize=inp.gpu_types, ordered=True)
        m.Jplus = pyo.Set(initialize=[j for j, on in zip(inp.job_ids, self.counted.tolist()) if on], ordered=True)
        jt = [(j, t) for j in inp.job_ids for t in inp.gpu_types]
        job = {j: k for k, j in enumerate(inp.job_ids)}
        kind = {t: k for k, t in enumerate(inp.gpu_types)}
        m.a = pyo.Param(m.J, m.Tp, initialize={(j, t): float(self.rate[job[j], kind[t]]) for j, t in jt})
        m.b = pyo.Param(m.J, initialize={j: float(self.owed[job[j]]) for j in inp.job_ids})
        m.s = pyo.Param(m.J, initialize={j: float(inp.scale[job[j]]) for j in inp.job_ids})
        m.n = pyo.Param(m.Tp, initialize={t: float(inp.capacity_gpus[kind[t]]) for t in inp.gpu_types})
        runs = {(j, t): inp.throughput[job[j], kind[t]] > 0 for j, t in jt}
        m.X = pyo.Var(m.J, m.Tp, domain=pyo.NonNegativeReals, bounds=lambda m, j, t: (0, 1 if runs[j, t] else 0))  # (runs)
        rate = {j: sum(m.a[j, t] * m.X[j, t] for t in m.Tp) for j in m.Jplus}
        m.time = pyo.Constraint(m.J, rule=lambda m, j: sum(m.X[j, t] for t in m.Tp) <= 1)
        m.cap = pyo.Constraint(m.Tp, rule=lambda m, t: sum(m.s[j] * m.X[j, t] for j in m.J) <= m.n[t])
        if self.floor is None:
            m.z = pyo.Var(domain=pyo.NonNegativeReals, bounds=(0, self.z_upper()))
            m.fair = pyo.Constraint(m.Jplus, rule=lambda m, j: m.b[j] * m.z <= rate[j])
            m.obj = pyo.Objective(expr=m.z, sense=pyo.maximize)
        else:
            floor = self.floor
            m.floor = pyo.Constraint(m.Jplus, rule=lambda m, j: m.b[j] * floor <= rate[j])
            m.obj = pyo.Objective(expr=sum(rate[j] / m.b[j] for j in m.Jplus), sense=pyo.maximize)
        m.columns = [m.X[j, t] for j, t in jt] + ([m.z] if self.floor is None else [])
        return m

    def time_fractions(self, values: np.ndarray) -> np.ndarray:
        """X as a (jobs, types) array from a point in the array layout, clipped to [0, 1]."""
        return np.clip(np.asarray(values[: self.num_x], dtype=float), 0.0, 1.0).reshape(self.inp.num_jobs,
                                                                                         self.inp.num_types)


def _las(inp: GavelInput, throughput: np.ndarray) -> MaxMinLP:
    """LAS over the throughputs given: a_jt = s_j T_jt / (w_j E_j), b_j = 1."""
    equal = equal_share_throughput(replace(inp, throughput=throughput))
    counted = equal > 0
    rate = np.zeros_like(throughput)
    rate[counted] = (inp.scale / inp.weight)[counted, None] * throughput[counted] / equal[counted, None]
    return MaxMinLP(inp, rate, np.ones(inp.num_jobs), counted)


def las_lp(inp: GavelInput) -> MaxMinLP:
    """Gavel's heterogeneity-aware least-attained-service (max-min fairness over throughputs
    normalized by each job's equal share: its MaxMinFairnessPolicyWithPerf), stage 1."""
    return _las(inp, inp.throughput)


def las_agnostic_lp(inp: GavelInput) -> MaxMinLP:
    """The heterogeneity-agnostic LAS (Gavel's MaxMinFairnessPolicy): the same with every
    throughput the job has read as 1, so it shares GPU-time, blind to how fast each type runs it."""
    return _las(inp, (inp.throughput > 0).astype(float))


def makespan_lp(inp: GavelInput) -> MaxMinLP:
    """Gavel's makespan (MinTotalDuration with throughputs) as one LP, stage 1: z = 1 / the time
    by which every job can finish at these rates. A job whose remaining steps are unknown (NaN,
    or no array at all) is not in J+: it runs only where the LP leaves time over."""
    left = np.full(inp.num_jobs, math.nan) if inp.remaining_steps is None else inp.remaining_steps
    counted = (left > 0) & (inp.throughput.max(axis=1, initial=0.0) > 0)  # NaN > 0 is False
    return MaxMinLP(inp, inp.throughput.copy(), np.where(counted, left, 1.0), counted)


def isolated_throughput(inp: GavelInput) -> np.ndarray:
    """I_j: each job's throughput alone on 1/|J| of the cluster (Gavel's IsolatedPolicy, on the
    types it can run on): X_jt = n_t [T_jt > 0] / (|J| s_j), each row scaled to sum at most 1."""
    runs = inp.throughput > 0
    x = inp.capacity_gpus[None, :] * runs / (max(inp.num_jobs, 1) * inp.scale[:, None])
    x /= np.maximum(x.sum(axis=1), 1.0)[:, None]
    return (inp.throughput * x).sum(axis=1)


def _ftf_terms(inp: GavelInput, isolated_s: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """J+ of finish-time fairness (jobs with known steps left that can run somewhere), R_j and
    D_j = c_j + R_j / I_j (0 outside J+)."""
    left = np.full(inp.num_jobs, math.nan) if inp.remaining_steps is None else inp.remaining_steps
    counted = (left > 0) & (inp.throughput.max(axis=1, initial=0.0) > 0)  # NaN > 0 is False
    left = np.where(counted, left, 0.0)
    alone = isolated_throughput(inp)
    return counted, left, np.where(counted, isolated_s + left / np.where(counted, alone, 1.0), 0.0)


def ftf_lp(inp: GavelInput, rho: float, elapsed_s: np.ndarray, isolated_s: np.ndarray) -> MaxMinLP:
    """The finish-time-fairness model at `rho` (module docstring): feasible iff its z* >= 1.

    Parameters
    ----------
    inp : GavelInput
        The round, with remaining_steps (R_j).
    rho : float
        The largest finish-time ratio allowed; rho D_j > e_j for every job of J+.
    elapsed_s, isolated_s : ndarray, shape (jobs,)
        e_j, seconds since each job arrived; c_j, the seconds its progress so far would have
        taken alone.

    Raises
    ------
    ValueError
        Some job has waited too long to finish by `rho` (rho D_j <= e_j).
    """
    counted, left, whole_s = _ftf_terms(inp, isolated_s)
    horizon = rho * whole_s - elapsed_s  # rho D_j - e_j
    if (horizon[counted] <= 0).any():
        raise ValueError(f"finish-time fairness: rho = {rho} is below what a job that has waited allows")
    return MaxMinLP(inp, inp.throughput.copy(), np.where(counted, left / np.where(counted, horizon, 1.0), 1.0), counted)


def finish_time_fairness(inp: GavelInput, elapsed_s: np.ndarray, isolated_s: np.ndarray,
                         max_z: Callable[[MaxMinLP], float], rel_tol: float = 1e-4) -> tuple[float, MaxMinLP]:
    """The smallest rho (within `rel_tol`) at which `ftf_lp` is feasible, and its model (module
    docstring's bisection); `max_z` solves a model's stage 1 and returns its z* (a solver of the
    caller's choice: formulations do not solve). Without a job in J+: rho 0 and a model of none."""
    counted, left, whole_s = _ftf_terms(inp, isolated_s)
    if not counted.any():
        return 0.0, MaxMinLP(inp, inp.throughput.copy(), np.ones(inp.num_jobs), counted)
    e, R, D = elapsed_s[counted], left[counted], whole_s[counted]
    lo = float(((e + R / inp.throughput[counted].max(axis=1)) / D).max())
    hi = float(((e + R / isolated_throughput(inp)[counted]) / D).max())  # the isolated allocation meets it
    while hi - lo > rel_tol * hi:
        mid = (lo + hi) / 2
        if (mid * D > e).all() and max_z(ftf_lp(inp, mid, elapsed_s, isolated_s)) >= 1.0 - 1e-9:
            hi = mid
        else:
            lo = mid
    return hi, ftf_lp(inp, hi, elapsed_s, isolated_s)
