"""Gavel's round mechanism (Narayanan et al., OSDI'20, section 5): an LP's time fractions, realized round by round.

Each round the policy solves its LP (schedlab.formulations.gavel) for X[j, t], the fraction of
time job j should run on GPU type t, then:

1. priorities: X[j, t] / the share of the rounds since the job arrived in which it ran on t
   (a job that has not yet run on t has priority infinity where X[j, t] > 0; Gavel's is
   X * 1e9); ties go to the larger X, then to the job that has run least;
2. in priority order, a (job, type) entry is scheduled if the job has none yet this round and
   the type has the job's gang free (JobSpec.gang_gpus, Gavel's scale factor): a job's GPUs
   are always of one type. Entries of X = 0 come last and use GPUs that would idle (Gavel's
   scheduler runs them too);
3. placement per type: a job that keeps its type keeps its GPUs (no needless restart, as
   Gavel's _schedule_jobs_on_workers); the others, largest gang first, on one node where
   one fits (best fit), else on whole nodes, else over the nodes with the most free GPUs
   (consolidated placement preferred, as Gavel's strided assignment).

Jobs are rigid: they train at their submitted batch (JobSpec.submitted_bsz) on their gang, split
within their batch limits on the type (JobSpec.batch_on): a type on which that split does not fit
is not tried. A pinned job (JobSpec.pinned) runs on the GPUs it holds before any entry is
scheduled; an allocation on a type the job's parameters were projected for says so.
Registered policies:

gavel_las           heterogeneity-aware LAS (Gavel's max_min_fairness_perf)
gavel_las_agnostic  heterogeneity-agnostic LAS (Gavel's max_min_fairness): X from the LP that
                    reads every throughput as 1, realized per job over all types together; a
                    job runs on the first type where its gang fits: the one it runs on, then
                    the others in an order drawn anew each round (Gavel's shuffle of worker
                    types)
gavel_makespan      Gavel's makespan (min_total_duration_perf), from remaining_steps
gavel_ftf           Gavel's finish-time fairness (finish_time_fairness_perf), from
                    remaining_steps and each job's age; the seconds its progress would have
                    taken alone accumulate round by round, as Gavel's do

What we changed: the received share counts the rounds the policy has seen the job in (Gavel
counts time since its last allocation reset and carries deficits as a tie-break); every LP runs
a second stage that spends capacity the max-min does not need (formulations.gavel). As in
Gavel, the LP's capacity is fluid: where gangs of different sizes share a type, whole rounds may
not realize X exactly (a 4-GPU gang needs 4 GPUs free at once), and the shares come close.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import ClassVar

import numpy as np

from schedlab.errors import ConfigError
from schedlab.formulations.gavel import (
    GavelInput,
    MaxMinLP,
    finish_time_fairness,
    gavel_input,
    isolated_throughput,
    las_agnostic_lp,
    las_lp,
    makespan_lp,
)
from schedlab.formulations.packing import NodeState
from schedlab.milp import OPTIMAL, SolveOutcome
from schedlab.models.efficiency import goodput, submitted_fits, submitted_split
from schedlab.policies.base import HEURISTIC
from schedlab.solvers.registry import SolverEntry
from schedlab.solvers.registry import solver as solver_entry
from schedlab.state import GpuRef, JobAllocation, JobSpec, RoundInput, RoundResult, Settings
from schedlab.verify import verify

__all__ = ["LP_TOLERANCE", "GavelFtfPolicy", "GavelLasAgnosticPolicy", "GavelLasPolicy", "GavelMakespanPolicy", "priorities",
           "take_gang"]

LP_TOLERANCE = 1e-6  # the largest violation of the LP a solver's point may have (HiGHS's is 1e-7)


def priorities(x: np.ndarray, received: np.ndarray) -> np.ndarray:
    """X / received share, elementwise: infinity where X > 0 and nothing was received, 0 where X = 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(x > 0, np.where(received > 0, x / np.where(received > 0, received, 1.0), math.inf), 0.0)


def take_gang(state: NodeState, nodes: tuple[int, ...], gang: int) -> tuple[GpuRef, ...]:
    """`gang` GPUs of `nodes` (one GPU type), consolidated where possible: one node (best fit),
    else whole nodes, else the nodes with the most free GPUs first. The caller checked that
    `nodes` have `gang` GPUs free."""
    per_node = max(state.cluster.nodes[k].gpus for k in nodes)
    if gang <= per_node and (refs := state.take_shape(nodes, 1, gang)) is not None:
        return refs
    if gang % per_node == 0 and (refs := state.take_shape(nodes, gang // per_node, per_node)) is not None:
        return refs
    taken: list[GpuRef] = []
    for k in sorted(nodes, key=lambda k: (-len(state.free[k]), k)):
        n = min(len(state.free[k]), gang - len(taken))
        taken += [GpuRef(state.cluster.nodes[k].id, i) for i in state.free[k][:n]]
        state.set_free(k, state.free[k][n:])
        if len(taken) == gang:
            break
    return tuple(taken)


def _allocation(job: JobSpec, gpu_type: str, gpus: tuple[GpuRef, ...]) -> JobAllocation:
    """The job at its submitted batch on `gpus` (of `gpu_type`), with its goodput there."""
    if not gpus:
        return JobAllocation.unallocated(job.id)
    r = len(gpus)
    micro, accum = submitted_split(job, r, gpu_type)
    value = float(goodput(job.throughput[gpu_type], job.grad_stats, job.batch.init_bsz, len({g.node for g in gpus}), r,
                          micro, accum))
    return JobAllocation(job.id, gpus, r * micro * (accum + 1), micro, accum, value, 0.0, job.restarted_on(gpus),
                         projected=job.projected_on(gpu_type))


@dataclass
class GavelLasPolicy:
    """Gavel's heterogeneity-aware LAS realized by its round mechanism (module docstring).

    `solver` names the registry's solver of the LP (one that solves LPs exactly: highs, or a
    Pyomo solver); `seed` draws the agnostic policy's order of types each round. The policy
    remembers, per job, the rounds it has been seen in and those it ran on each GPU type.
    """

    solver: str = "highs"
    seed: int = 0
    name: ClassVar[str] = "gavel_las"
    batch_mode: ClassVar[str] = "fixed"
    throughput_model: ClassVar[str] = "oracle"
    type_blind: ClassVar[bool] = False  # realize X per job over all types (agnostic) instead of per type
    _seen: dict[str, int] = field(default_factory=dict)
    _ran: dict[tuple[str, str], int] = field(default_factory=dict)
    _rounds: int = 0

    def model(self, inp: GavelInput) -> MaxMinLP:
        """The LP whose time fractions this policy realizes (stage 1)."""
        return las_lp(inp)

    def time_fractions(self, round_input: RoundInput, inp: GavelInput) -> tuple[np.ndarray, str]:
        """X from the LP's two stages, and a line saying how they ended (X = 0 where the first failed).

        Raises
        ------
        ConfigError
            The solver's point breaks the LP (a solver that does not solve LPs exactly: cpsat
            scales continuous columns to integers).
        """
        settings = replace(round_input.settings, solver=self.solver)
        deadline_s = time.perf_counter() + settings.time_limit_s
        solve = solver_entry(self.solver)
        lp = self.model(inp)
        first = self._solve(solve, lp, settings, deadline_s)
        if first.values is None:
            return np.zeros(inp.throughput.shape), f"gavel LP {first.status}: {first.message}"
        lp2 = lp.second_stage(first.objective)
        second = self._solve(solve, lp2, settings, deadline_s)
        if second.values is None:
            return lp.time_fractions(first.values), f"gavel LP {first.status}, z = {first.objective:.6g}"
        status = first.status if first.status != OPTIMAL else second.status
        return lp2.time_fractions(second.values), f"gavel LP {status}, z = {first.objective:.6g}"

    def _solve(self, solve: SolverEntry, lp: MaxMinLP, settings: Settings, deadline_s: float) -> SolveOutcome:
        """The solver's outcome on one LP within what is left of the round's limit (every LP of
        a round shares it; `deadline_s` a perf_counter time), its point checked against the
        LP's rows and bounds."""
        left_s = max(deadline_s - time.perf_counter(), 1e-3)
        outcome, _ = solve(lp, replace(settings, time_limit_s=left_s))
        if outcome.values is not None and (broken := lp.arrays().max_violation(outcome.values)) > LP_TOLERANCE:
            raise ConfigError(f"{self.name}: solver {self.solver!r} answered a point {broken:.2g} outside the LP; "
                              "use an LP solver: highs, portfolio, appsi_highs or a Pyomo solver")
        return outcome

    def received(self, inp: GavelInput) -> np.ndarray:
        """Each job's share of its rounds so far spent on each type, (jobs, types)."""
        seen = np.array([self._seen.get(j, 0) for j in inp.job_ids], dtype=float)
        ran = np.array([[self._ran.get((j, t), 0) for t in inp.gpu_types] for j in inp.job_ids],
                       dtype=float).reshape(inp.throughput.shape)
        return ran / np.maximum(seen, 1.0)[:, None]

    def _entries(self, inp: GavelInput, x: np.ndarray, received: np.ndarray,
                 current: dict[int, int]) -> list[tuple[int, list[int]]]:
        """(job, the types to try in turn) in priority order (module docstring); `current` gives
        the type a running job runs on, which a type-blind policy tries first (no needless move)."""
        if self.type_blind:
            x, received = x.sum(axis=1, keepdims=True), received.sum(axis=1, keepdims=True)
        prio = priorities(x, received)
        keys = [(-prio[j, c], -x[j, c], received[j].sum(), j, c) for j in range(inp.num_jobs) for c in range(x.shape[1])]
        if self.type_blind:
            order = np.random.default_rng((self.seed, self._rounds)).permutation(inp.num_types).tolist()
            return [(j, sorted(order, key=lambda t: t != current.get(j))) for *_, j, _ in sorted(keys)]
        return [(j, [c]) for *_, j, c in sorted(keys)]

    def schedule(self, round_input: RoundInput) -> RoundResult:
        """The round's verified allocation: X from the LP, then priorities, gangs and placement."""
        t0 = time.perf_counter()
        inp = gavel_input(round_input)
        x, message = self.time_fractions(round_input, inp)
        free = inp.capacity_gpus.copy()
        chosen: dict[int, int] = {}
        type_index = {name: t for t, name in enumerate(inp.gpu_types)}
        kinds = {n.id: n.gpu_type for n in round_input.cluster.nodes}
        current = {j: type_index[kinds[job.current_gpus[0].node]] for j, job in enumerate(round_input.jobs)
                   if job.current_gpus}
        for j, job in enumerate(round_input.jobs):  # pinned: on the GPUs it holds, first
            if job.pinned:
                chosen[j] = current[j]
                free[current[j]] -= len(job.current_gpus)
        for j, types in self._entries(inp, x, self.received(inp), current):
            if j in chosen:
                continue
            for t in types:
                if (inp.throughput[j, t] > 0 and inp.scale[j] <= free[t]
                        and submitted_fits(round_input.jobs[j], int(inp.scale[j]), inp.gpu_types[t])):
                    chosen[j] = t
                    free[t] -= inp.scale[j]
                    break
        gpus = self._place(round_input, inp, chosen)
        jobs = round_input.jobs
        allocations = tuple(_allocation(job, inp.gpu_types[chosen[j]] if j in chosen else "", gpus.get(j, ()))
                            for j, job in enumerate(jobs))
        verify(round_input, allocations)
        self._remember(inp, chosen)
        return RoundResult(allocations, HEURISTIC, self.name, math.nan, math.nan, math.nan, 0.0,
                           time.perf_counter() - t0, True, message)

    @staticmethod
    def _place(round_input: RoundInput, inp: GavelInput, chosen: dict[int, int]) -> dict[int, tuple[GpuRef, ...]]:
        """Concrete GPUs of the chosen jobs: pinned ones and those keeping their type keep their
        GPUs, the others largest gang first (`take_gang`)."""
        cluster = round_input.cluster
        state = NodeState(cluster)
        nodes_of = {t: tuple(k for k, n in enumerate(cluster.nodes) if n.gpu_type == name)
                    for t, name in enumerate(inp.gpu_types)}
        type_of_node = {n.id: n.gpu_type for n in cluster.nodes}
        out: dict[int, tuple[GpuRef, ...]] = {}
        for j, t in chosen.items():
            current = round_input.jobs[j].current_gpus
            if round_input.jobs[j].pinned:
                state.take_exact(current)
                out[j] = current
            elif (len(current) == inp.scale[j] and all(type_of_node[g.node] == inp.gpu_types[t] for g in current)
                    and state.take_exact(current)):
                out[j] = current
        for j in sorted(set(chosen) - set(out), key=lambda j: (-inp.scale[j], j)):
            out[j] = take_gang(state, nodes_of[chosen[j]], int(inp.scale[j]))
        return out

    def _remember(self, inp: GavelInput, chosen: dict[int, int]) -> None:
        """Count this round: seen for every job, ran for each chosen (job, type); forget jobs that left."""
        present = set(inp.job_ids)
        self._seen = {j: self._seen.get(j, 0) + 1 for j in inp.job_ids}
        self._ran = {key: n for key, n in self._ran.items() if key[0] in present}
        for j, t in chosen.items():
            key = (inp.job_ids[j], inp.gpu_types[t])
            self._ran[key] = self._ran.get(key, 0) + 1
        self._rounds += 1


@dataclass
class GavelLasAgnosticPolicy(GavelLasPolicy):
    """Gavel's heterogeneity-agnostic LAS: GPU-time shared max-min fairly, types ignored (module docstring)."""

    name: ClassVar[str] = "gavel_las_agnostic"
    type_blind: ClassVar[bool] = True

    def model(self, inp: GavelInput) -> MaxMinLP:
        """The LP that reads every throughput as 1 (`las_agnostic_lp`)."""
        return las_agnostic_lp(inp)


@dataclass
class GavelMakespanPolicy(GavelLasPolicy):
    """Gavel's makespan policy realized by the round mechanism; needs every job's remaining_steps."""

    name: ClassVar[str] = "gavel_makespan"

    def model(self, inp: GavelInput) -> MaxMinLP:
        """The makespan LP (`makespan_lp`)."""
        return makespan_lp(inp)


@dataclass
class GavelFtfPolicy(GavelLasPolicy):
    """Gavel's finish-time fairness realized by the round mechanism (module docstring): X at the
    smallest largest finish-time ratio rho (formulations.gavel.finish_time_fairness). The policy
    also remembers each job's steps left and throughput alone last round, and the seconds its
    progress so far would have taken alone (c_j)."""

    name: ClassVar[str] = "gavel_ftf"
    _alone_s: dict[str, float] = field(default_factory=dict)
    _last: dict[str, tuple[float, float]] = field(default_factory=dict)

    def isolated_s(self, inp: GavelInput) -> np.ndarray:
        """c_j: last round's c_j plus the steps done since at last round's throughput alone."""
        left = np.full(inp.num_jobs, math.nan) if inp.remaining_steps is None else inp.remaining_steps
        out = np.zeros(inp.num_jobs)
        for j, job_id in enumerate(inp.job_ids):
            before, alone = self._last.get(job_id, (math.nan, 0.0))
            done = before - left[j]
            out[j] = self._alone_s.get(job_id, 0.0) + (done / alone if alone > 0 and done > 0 else 0.0)
        return out

    def time_fractions(self, round_input: RoundInput, inp: GavelInput) -> tuple[np.ndarray, str]:
        """X from the bisection on rho and stage 2 at the rho found (X = 0 where stage 2 fails).

        Raises
        ------
        ConfigError
            The solver's point breaks the LP (as GavelLasPolicy.time_fractions).
        """
        settings = replace(round_input.settings, solver=self.solver)
        deadline_s = time.perf_counter() + settings.time_limit_s
        solve = solver_entry(self.solver)
        elapsed_s = np.array([job.age_s for job in round_input.jobs], dtype=float)
        rho, lp = finish_time_fairness(inp, elapsed_s, self.isolated_s(inp),
                                       lambda lp: self._solve(solve, lp, settings, deadline_s).objective)
        second = self._solve(solve, lp.second_stage(1.0), settings, deadline_s)
        if second.values is None:
            return np.zeros(inp.throughput.shape), f"gavel FTF {second.status}: {second.message}"
        return lp.time_fractions(second.values), f"gavel FTF {second.status}, rho = {rho:.6g}"

    def _remember(self, inp: GavelInput, chosen: dict[int, int]) -> None:
        """GavelLasPolicy's counts, and this round's c_j, steps left and throughput alone."""
        alone_s, throughput = self.isolated_s(inp), isolated_throughput(inp)
        left = np.full(inp.num_jobs, math.nan) if inp.remaining_steps is None else inp.remaining_steps
        self._alone_s = dict(zip(inp.job_ids, alone_s.tolist()))
        self._last = {job_id: (float(r), float(i)) for job_id, r, i in zip(inp.job_ids, left, throughput)}
        super()._remember(inp, chosen)
