"""Round-by-round replay of a workload under any policy of the registry.

Each round (Pollux artifact semantics, simulator.py): every job advances `round_s` seconds under
its current GPUs (replay.jobs.advance: exact epoch crossings and completion times, 30 s without
progress after each start or move); then the policy is called with the jobs that have arrived
and not finished, exactly as an embedding scheduler calls solve_round(): a RoundInput with the
cluster, each job's current GPUs, age, restarts, its throughput model and gradient statistics,
and the hints of baselines (requested GPUs, attained service, remaining steps). A job whose GPU
set changes is reallocated. Jobs that arrive or finish inside a round wait for the next one.

What the policy sees of a job's speed is, by default, what a real scheduler would: a model
fitted online to the configurations the job has run (`throughput_model="online"`, as Pollux
does), with at most twice the GPUs it has been measured on (Pollux's exploration rule);
"oracle" hands it the model fitted to the full measured tables (an ablation, and what the
artifact's Optimus+Oracle assumes). NCF jobs of adaptive policies train on one GPU at batch
32768, as the artifact pins them.

Layer freezing (IceFrog-style, models.freezing): a seeded `freeze_opt_in` fraction of the jobs
opt in with a penalty budget; the policy sees each one's progress, training length and budget
left (JobSpec.freezing), and a job runs each round with the groups its allocation froze
(replay.jobs.advance). Policies that do not freeze leave every job at 0.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits

from schedlab.errors import ConfigError
from schedlab.models.freezing import DEFAULT_BUDGET, layer_profile
from schedlab.models.profiles import POLLUX_GPU_TYPE, shipped_profiles
from schedlab.models.throughput import MeasuredTable
from schedlab.policies.base import Policy
from schedlab.replay.jobs import (Freezing, JobAgent, JobState, TraceJob, advance, isolated_time_s, reallocate,
                                  remaining_steps)
from schedlab.replay.metrics import summarize
from schedlab.replay.truth import ApplicationTruth, application_truth, calibrated_truth
from schedlab.state import Cluster, FreezePenalty, FreezeSpec, GradStats, JobSpec, Node, RoundInput, ThroughputParams

# What a job's model says before it has measured anything: Pollux's initial parameter guess
# and gradient statistics that make larger batches worth nothing (gain 1).
PRIOR_PARAMS = ThroughputParams(0.1, 0.01, 0.1, 0.01, 0.1, 0.01, 1.0)
PRIOR_GRAD = GradStats(sqr=1.0, var=0.0)
PINNED_ADAPTIVE = {"ncf": (1, 32768)}  # application -> (GPUs, total batch) under adaptive policies
MAX_REPLICAS = 64  # the artifact's simulator cap


@dataclass(frozen=True)
class ReplayConfig:
    num_nodes: int = 16
    gpus_per_node: int = 4
    round_s: float = 60.0
    restart_delay_s: float = 30.0
    throughput_model: str | None = None  # None: the policy's own choice; "online" or "oracle"
    horizon_s: float = 60 * 86400.0  # stop here and report the jobs still running
    freeze_opt_in: float = 0.0  # fraction of jobs that opt in to layer freezing
    freeze_budget: float = DEFAULT_BUDGET  # each opted-in job's accuracy-penalty budget
    freeze_penalty: FreezePenalty = FreezePenalty()
    freeze_seed: int = 0  # which jobs opt in
    # application -> MeasuredTable from a calibration table (calibrate.table.measured_table):
    # that application's true step times; its gradient statistics stay Pollux's
    calibration: tuple[tuple[str, MeasuredTable], ...] = ()

    def check(self) -> None:
        problems = [f"{k} must be > 0" for k in ("num_nodes", "gpus_per_node", "round_s", "horizon_s")
                    if not getattr(self, k) > 0]
        if not 0.0 <= self.freeze_opt_in <= 1.0:
            problems.append(f"freeze_opt_in {self.freeze_opt_in} must be a fraction in [0, 1]")
        if self.freeze_budget < 0:
            problems.append("freeze_budget must be >= 0")
        if self.restart_delay_s < 0:
            problems.append("restart_delay_s must be >= 0")
        if self.throughput_model not in (None, "online", "oracle"):
            problems.append(f"throughput_model {self.throughput_model!r}: use online or oracle")
        if problems:
            raise ConfigError("replay config: " + "; ".join(problems))

    @property
    def total_gpus(self) -> int:
        return self.num_nodes * self.gpus_per_node


@dataclass(frozen=True)
class ReplayResult:
    jobs: pd.DataFrame  # one row per job
    rounds: pd.DataFrame  # one row per scheduling round
    summary: dict


@dataclass(frozen=True)
class _JobRules:
    """How a job is presented to this policy: its fixed batch (None: adaptive) and GPU cap."""

    fixed_bsz: int | None
    max_gpus: int | None  # None: Pollux's exploration rule


def _rules(job: TraceJob, truth: ApplicationTruth, policy: Policy, total_gpus: int) -> _JobRules:
    if policy.batch_mode == "adaptive":
        if job.application in PINNED_ADAPTIVE:
            gpus, bsz = PINNED_ADAPTIVE[job.application]
            return _JobRules(bsz, gpus)
        return _JobRules(None, None)
    if policy.batch_mode == "allocated":  # ONES: at most 4x the request
        return _JobRules(None, min(4 * job.num_replicas, truth.max_bsz // truth.min_local_bsz, total_gpus))
    cap = max(job.batch_size // truth.min_local_bsz, job.num_replicas)
    return _JobRules(job.batch_size, min(cap, total_gpus))


def _freeze_spec(state: JobState, truth: ApplicationTruth, freezing: Freezing | None) -> FreezeSpec | None:
    if freezing is None:
        return None
    return FreezeSpec(groups=freezing.groups, progress=min(state.progress / truth.completion_progress, 1.0),
                      total_steps=truth.completion_progress, budget_left=max(freezing.budget - state.penalty_spent, 0.0),
                      penalty=freezing.penalty)


def _opt_ins(jobs: tuple[TraceJob, ...], config: ReplayConfig) -> dict[str, Freezing]:
    """The seeded round(freeze_opt_in x jobs) jobs that opt in to freezing."""
    count = round(config.freeze_opt_in * len(jobs))
    picked = np.random.default_rng(config.freeze_seed).choice(len(jobs), size=count, replace=False)
    return {jobs[i].name: Freezing(layer_profile(jobs[i].application), config.freeze_penalty, config.freeze_budget)
            for i in sorted(picked)}


def _job_spec(state: JobState, agent: JobAgent, truth: ApplicationTruth, rules: _JobRules, model: str,
              now_s: float, total_gpus: int, freezing: Freezing | None = None) -> JobSpec:
    job = state.job
    if model == "oracle":
        params = shipped_profiles()[job.application].params
        grad = truth.grad_stats(state.total_bsz or truth.init_bsz, min(state.epoch, truth.max_epochs - 1))
        explore_cap = MAX_REPLICAS
    else:
        params = agent.params or PRIOR_PARAMS
        grad = state.grad or PRIOR_GRAD
        explore_cap = max(2 * agent.max_profiled_replicas, 1)
    cap = rules.max_gpus or min(explore_cap, MAX_REPLICAS, truth.max_bsz // truth.min_local_bsz)
    return JobSpec(
        id=job.name,
        throughput={POLLUX_GPU_TYPE: params},
        grad_stats=grad,
        batch=truth.limits,
        min_gpus=1,
        max_gpus=min(cap, total_gpus),
        current_gpus=state.gpus,
        age_s=now_s - job.submit_s,
        num_restarts=state.num_restarts,
        fixed_bsz=rules.fixed_bsz,
        application=job.application,
        requested_gpus=job.num_replicas,
        requested_bsz=job.batch_size,
        attained_service_gpu_s=state.attained_gpu_s,
        remaining_steps=remaining_steps(state, truth, rules.fixed_bsz),
        freezing=_freeze_spec(state, truth, freezing),
    )


def make_cluster(config: ReplayConfig) -> Cluster:
    return Cluster(tuple(Node(f"n{k}", config.gpus_per_node, POLLUX_GPU_TYPE) for k in range(config.num_nodes)))


def replay(jobs: tuple[TraceJob, ...], policy: Policy, config: ReplayConfig = ReplayConfig(),
           on_round: Callable[[float, int], None] | None = None) -> ReplayResult:
    """Replay `jobs` under `policy`; `on_round(now_s, jobs_done)` is called after every round.

    BLAS runs single-threaded inside: a replay's arrays are tiny, and OpenBLAS's idle workers
    spin, which made one replay cost 10x its CPU time when replays ran side by side.
    """
    with threadpool_limits(limits=1, user_api="blas"):
        return _replay(jobs, policy, config, on_round)


def _replay(jobs: tuple[TraceJob, ...], policy: Policy, config: ReplayConfig,
            on_round: Callable[[float, int], None] | None) -> ReplayResult:
    config.check()
    if not jobs:
        raise ConfigError("the workload has no jobs")
    model = config.throughput_model or policy.throughput_model
    cluster = make_cluster(config)
    total = config.total_gpus
    calibrated = dict(config.calibration)
    truths = {j.name: calibrated_truth(j.application, calibrated[j.application]) if j.application in calibrated
              else application_truth(j.application) for j in jobs}
    rules = {j.name: _rules(j, truths[j.name], policy, total) for j in jobs}
    agents = {j.name: JobAgent(truths[j.name], adaptive=policy.batch_mode == "adaptive" and rules[j.name].fixed_bsz is None)
              for j in jobs}
    states = {j.name: JobState(j) for j in jobs}
    freezing = _opt_ins(jobs, config)
    rounds: list[dict] = []
    now = 0.0
    while now < config.horizon_s and not all(s.done for s in states.values()):
        states = {k: advance(s, truths[k], agents[k], rules[k].fixed_bsz, now, config.round_s, freezing.get(k))
                  for k, s in states.items()}
        now += config.round_s
        states = {k: replace(s, gpus=()) if s.done and s.gpus else s for k, s in states.items()}
        active = [s for s in states.values() if s.job.submit_s <= now and not s.done]
        log = {"time_s": now, "active_jobs": len(active), "solve_ms": math.nan, "status": "", "objective": math.nan}
        if active:
            ri = RoundInput(cluster, tuple(_job_spec(s, agents[s.job.name], truths[s.job.name], rules[s.job.name],
                                                     model, now, total, freezing.get(s.job.name)) for s in active),
                            round_s=config.round_s)
            t0 = time.perf_counter()
            result = policy.schedule(ri)
            log |= {"solve_ms": 1e3 * (time.perf_counter() - t0), "status": result.status,
                    "objective": result.objective}
            for alloc in result.allocations:
                s = states[alloc.job_id]
                if set(alloc.gpus) != set(s.gpus):
                    bsz = alloc.total_bsz if policy.batch_mode == "allocated" else rules[alloc.job_id].fixed_bsz
                    s = reallocate(s, agents[alloc.job_id], alloc.gpus, bsz, config.restart_delay_s)
                states[alloc.job_id] = replace(s, frozen_groups=alloc.frozen_groups if alloc.job_id in freezing else 0)
        running = [s for s in states.values() if s.gpus]
        log |= {"running_jobs": len(running), "gpus_used": sum(len(s.gpus) for s in running)}
        rounds.append(log)
        if on_round:
            on_round(now, sum(s.done for s in states.values()))
    jobs_df = _jobs_frame(states, truths, config.gpus_per_node, freezing)
    rounds_df = pd.DataFrame(rounds)
    return ReplayResult(jobs_df, rounds_df, summarize(jobs_df, rounds_df, total, now) | _freeze_summary(jobs_df))


def _freeze_summary(jobs: pd.DataFrame) -> dict:
    """Penalty spent by the jobs that opted in to freezing, and how many overspent their budget."""
    opted = jobs[jobs.freeze_budget.notna()]
    return {"freeze_jobs": int(len(opted)),
            "penalty_mean": float(opted.penalty_spent.mean()) if len(opted) else 0.0,
            "penalty_max": float(opted.penalty_spent.max()) if len(opted) else 0.0,
            "budget_violations": int((opted.penalty_spent > opted.freeze_budget * (1 + 1e-9)).sum())}


def write_outputs(result: ReplayResult, out_dir: str | Path) -> None:
    """jobs.csv, rounds.csv and summary.json in `out_dir` (created if needed)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    result.jobs.to_csv(out / "jobs.csv", index=False)
    result.rounds.to_csv(out / "rounds.csv", index=False)
    (out / "summary.json").write_text(json.dumps(result.summary, indent=2) + "\n")


def _jobs_frame(states: dict[str, JobState], truths: dict[str, ApplicationTruth], gpus_per_node: int,
                freezing: dict[str, Freezing]) -> pd.DataFrame:
    rows = []
    for name, s in states.items():
        job, truth = s.job, truths[name]
        packed = tuple(min(gpus_per_node, job.num_replicas - k) for k in range(0, job.num_replicas, gpus_per_node))
        isolated = isolated_time_s(truth, packed, job.batch_size)
        jct = s.completion_s - job.submit_s if s.done else math.nan
        rows.append({
            "name": name, "application": job.application, "submit_s": job.submit_s,
            "completion_s": s.completion_s if s.done else math.nan, "jct_s": jct,
            "num_replicas": job.num_replicas, "batch_size": job.batch_size, "restarts": s.num_restarts,
            "attained_gpu_s": s.attained_gpu_s, "epochs_done": s.epoch, "isolated_s": isolated,
            "ftf": jct / isolated if isolated > 0 else np.nan,
            "freeze_budget": freezing[name].budget if name in freezing else np.nan, "penalty_spent": s.penalty_spent,
        })
    return pd.DataFrame(rows)
