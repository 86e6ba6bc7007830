"""Goodput policies: the round MILP of formulations.goodput through solve_round().

pollux  p = -1 (Pollux's power mean), Pollux's restart factor with S = 30 s, and a large
        unallocated penalty: Pollux floors speedups at 1e-3 inside its p = -1 mean, so an
        unallocated job costs ~250x a job at its fair share; lambda = 100 puts leaving a job
        out in the same place relative to its smallest option (speedup ~0.3-0.5 at 64 GPUs).
sia     p = -0.5 and lambda = 1.1 (Sia, SOSP'23), same restart factor.
joint   pollux's settings on the joint formulation (formulations.joint): every option valued with
        its slowest GPU's variability tier and its spread over the topology, solved by HiGHS
        alone. The portfolio races HiGHS against CP-SAT, and the two stop at different optima
        (within mip_gap) of the same round, so a replay's answer depended on which finished
        first: workload-1 of joint.py's variability world gave 3,482 s and 2,888 s mean JCT in
        two runs. HiGHS alone answers each round from its inputs alone, and on that replay's
        491 rounds that LP first does not prove it took 40 s where the race took 53 s.
icefrog pollux's settings, and jobs that opt in to layer freezing freeze what the round model
        (formulations.freezing) chooses within their budgets. The round's spend is predicted
        with the job's online-fitted model while the job spends at its true rate, so the policy
        plans against budget_left / (1 + budget_margin). pollux and sia ignore opt-ins
        (freeze = False): they are the no-freezing baselines.
static_freeze
        pollux's round model with each opted-in job's freeze level fixed by PipeTransformer's
        geometric schedule, L_frozen(T) = ceil(L (1 - (1 - a)^T)), a = 1/3, with the epoch T
        counted as progress x `epochs` (a static schedule knows no budget: it spends what it spends).

Several GPU types: pollux and the policies on its settings know one type, so on a mixed cluster a
replay shows them each job's one model on every type (type_blind); sia and joint declare
type_blind = False and see each job's model per type (sim.view.GPU_TYPE_VIEWS).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import ClassVar

from schedlab.api import solve_round
from schedlab.formulations.options import placeable_gpus
from schedlab.models.efficiency import submitted_fits
from schedlab.models.freezing import geometric_frozen_groups
from schedlab.state import Cluster, JobSpec, RoundInput, RoundResult, Settings

__all__ = ["GoodputPolicy", "IceFrogPolicy", "JointPolicy", "PolluxPolicy", "SiaPolicy", "StaticFreezePolicy"]


def _pollux_settings() -> Settings:
    """Pollux's: p = -1, restart cost S = 30 s, unallocated penalty 100 (module docstring)."""
    return Settings(p=-1.0, restart_cost_s=30.0, unallocated_penalty=100.0)


@dataclass
class GoodputPolicy:
    """A goodput round per call. gang: every job runs on exactly the GPUs it asked for
    (requested_gpus) or waits, as gang schedulers run them, or where the round cannot place
    that many GPUs for one job (6 on 4-GPU nodes: neither one node nor whole nodes), on the
    fewest it can place above it, or, where a fixed batch does not split over those within its
    per-GPU limits (192 over 8 GPUs at >= 32 each), the nearest count at which it does
    (formulations.options.placeable_gpus); the round still chooses which jobs run, where, and
    at what batch."""

    settings: Settings
    freeze: bool = False
    gang: bool = False
    name: ClassVar[str] = "goodput"
    batch_mode: ClassVar[str] = "adaptive"
    throughput_model: ClassVar[str] = "online"
    type_blind: ClassVar[bool] = True  # one model per job on every GPU type, as Pollux knows one type

    def schedule(self, round_input: RoundInput) -> RoundResult:
        """solve_round on the round as this policy sees it (`round_for`)."""
        return solve_round(self.round_for(round_input))

    def round_for(self, round_input: RoundInput) -> RoundInput:
        """The round this policy's model solves: its settings, its view of each job."""
        jobs = tuple(self.sized(self.prepare(job), round_input.cluster) for job in round_input.jobs)
        return replace(round_input, jobs=jobs, settings=self.settings)

    def sized(self, job: JobSpec, cluster: Cluster) -> JobSpec:
        """The job as a gang policy sees it: on exactly its gang size (JobSpec.gang_gpus), or the
        fewest GPUs above it the round can place for one job (class docstring)."""
        if not self.gang:
            return job
        types = [t for t in sorted(cluster.gpu_types) if t in job.throughput]
        size = placeable_gpus(cluster, job.gang_gpus, lambda num_gpus: not job.fixed_bsz or any(
            submitted_fits(job, num_gpus, t) for t in types))
        return replace(job, min_gpus=size, max_gpus=size)

    def prepare(self, job: JobSpec) -> JobSpec:
        """The job as this policy's model sees it: opt-ins dropped unless the policy freezes."""
        return job if self.freeze or job.freezing is None else replace(job, freezing=None)


@dataclass
class PolluxPolicy(GoodputPolicy):
    """Pollux's round (module docstring: pollux); freezing opt-ins are ignored."""

    settings: Settings = field(default_factory=_pollux_settings)
    name: ClassVar[str] = "pollux"


@dataclass
class SiaPolicy(GoodputPolicy):
    """Sia's objective: p = -0.5, unallocated penalty 1.1, Pollux's restart factor."""

    settings: Settings = field(default_factory=lambda: Settings(p=-0.5, restart_cost_s=30.0, unallocated_penalty=1.1))
    name: ClassVar[str] = "sia"
    type_blind: ClassVar[bool] = False  # each job's model per GPU type (sim.view.GPU_TYPE_VIEWS)


@dataclass
class JointPolicy(GoodputPolicy):
    """Pollux's settings on the joint formulation, solved by HiGHS alone (module docstring: joint)."""

    settings: Settings = field(default_factory=lambda: replace(_pollux_settings(), formulation="joint", solver="highs"))
    name: ClassVar[str] = "joint"
    type_blind: ClassVar[bool] = False


@dataclass
class IceFrogPolicy(GoodputPolicy):
    """Pollux's round with layer freezing within each opted-in job's budget (module docstring: icefrog)."""

    settings: Settings = field(default_factory=_pollux_settings)
    freeze: bool = True
    budget_margin: float = 0.25
    name: ClassVar[str] = "icefrog"

    def prepare(self, job: JobSpec) -> JobSpec:
        """The job with the budget it plans against: budget_left / (1 + budget_margin)."""
        f = job.freezing
        return job if f is None else replace(job, freezing=replace(f, budget_left=f.budget_left / (1 + self.budget_margin)))


@dataclass
class StaticFreezePolicy(GoodputPolicy):
    """Pollux's round with PipeTransformer's geometric freezing schedule (module docstring: static_freeze)."""

    settings: Settings = field(default_factory=_pollux_settings)
    freeze: bool = True
    rate: float = 1 / 3
    epochs: int = 10
    name: ClassVar[str] = "static_freeze"

    def prepare(self, job: JobSpec) -> JobSpec:
        """The job pinned at its schedule's freeze level for the epoch it is in, its budget unbounded."""
        f = job.freezing
        if f is None:
            return job
        level = min(geometric_frozen_groups(len(f.groups), math.floor(f.progress * self.epochs), self.rate), f.top_level)
        # a static schedule ignores budgets: the whole remaining penalty range is allowed
        return replace(job, freezing=replace(f, min_frozen=level, max_frozen=level, budget_left=1.0))
