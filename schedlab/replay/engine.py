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

One engine for every world. The world is data (ReplayConfig, WORLDS): the cluster's shape, racks
and GPU variability (clusters.ClusterSpec; replay.world turns it into what jobs feel: a job's
true step is the measured table's with compute x its slowest GPU's true factor for its class and
sync x its spread's cost, while policies see only the cluster's tiers), the trace's jobs (Pollux
workloads train until their completion epoch; Sia-Philly jobs in PAL's semantics carry a fixed
work, TraceJob.work_s, done at 1 / (slowest factor x across-node factor) of full speed, times
the measured scaling of a GPU count other than the requested one), and the semantics: round
length, restart delay, when the first decision is taken, whether a job ends with its round.
Every policy of the registry runs on every world; every round's answer is verified.

Layer freezing (IceFrog-style, models.freezing): a seeded `freeze_opt_in` fraction of the jobs
opt in with a penalty budget; the policy sees each one's progress, training length and budget
left (JobSpec.freezing), and a job runs each round with the groups its allocation froze
(replay.jobs.advance). Policies that do not freeze leave every job at 0.
"""

from __future__ import annotations

import collections
import importlib
import math
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits

from schedlab.clusters import VARIABILITY, ClusterSpec, make_cluster
from schedlab.errors import ConfigError
from schedlab.io import json_text, spreadsheet_safe
from schedlab.models.freezing import DEFAULT_BUDGET, layer_profile
from schedlab.models.profiles import POLLUX_GPU_TYPE, shipped_profiles
from schedlab.models.throughput import MeasuredTable
from schedlab.policies.base import Policy
from schedlab.replay.jobs import (
    Freezing,
    JobAgent,
    JobState,
    TraceJob,
    advance,
    advance_work,
    isolated_time_s,
    reallocate,
    remaining_steps,
)
from schedlab.replay.metrics import summarize
from schedlab.replay.truth import ApplicationTruth, application_truth, calibrated_truth
from schedlab.replay.world import World
from schedlab.state import FreezePenalty, FreezeSpec, GradStats, JobSpec, RoundInput, ThroughputParams, variability_class
from schedlab.traces import WORKS
from schedlab.verify import verify

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
    # the cluster (clusters.ClusterSpec): racks and links, PAL's flat penalty, GPU variability
    racks: int = 0
    node_gbps: float = 100.0
    uplink_gbps: float = 100.0
    across_node_factor: float = 1.0
    variability: str = "none"
    cluster_seed: int = 0  # which measured GPUs the cluster draws, and PAL's k-means
    # semantics: the first decision (None: one round in, as Pollux's simulator), and whether a
    # job of fixed work is done at the end of the round it finishes in (PAL's simulator)
    first_decision_s: float | None = None
    finish_at_round_end: bool = False
    # how this world reads a Sia-Philly trace (traces.sia_philly_jobs): jobs of fixed work,
    # "iterations" or "seconds" of it per trace duration; None: a Pollux workload of the same arrivals
    sia_philly_work: str | None = None

    def check(self) -> None:
        problems = [f"{k} must be > 0" for k in ("num_nodes", "gpus_per_node", "round_s", "horizon_s")
                    if not getattr(self, k) > 0]
        if self.variability not in VARIABILITY:
            problems.append(f"variability {self.variability!r}: use one of {', '.join(VARIABILITY)}")
        if self.racks < 0 or self.across_node_factor < 1 or self.node_gbps <= 0 or self.uplink_gbps <= 0:
            problems.append("racks >= 0, across_node_factor >= 1, node_gbps and uplink_gbps > 0")
        if self.sia_philly_work not in (None, *WORKS):
            problems.append(f"sia_philly_work {self.sia_philly_work!r}: use one of {', '.join(WORKS)}")
        if self.first_decision_s is not None and self.first_decision_s < 0:
            problems.append("first_decision_s must be >= 0")
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

    def cluster_spec(self) -> ClusterSpec:
        return ClusterSpec(self.num_nodes, self.gpus_per_node, POLLUX_GPU_TYPE, self.racks, self.node_gbps,
                           self.uplink_gbps, self.across_node_factor, self.variability, self.cluster_seed)


# PAL's simulator (Jain et al. SC'24, github.com/hal-uw/blox-pal) as a world: 360 s rounds, no
# restart delay, every GPU at a measured Longhorn GPU's slowest run (policies see its tiers), a job
# spanning nodes 1.7x slower, the first decision at 0 and completions at a round's end. Its traces
# are Sia-Philly jobs of fixed work (traces.sia_philly_jobs); its queue (FIFO, the cut at the first
# job that does not fit) belongs to the placement policies (policies.placement).
PAL_WORLD = ReplayConfig(round_s=360.0, restart_delay_s=0.0, horizon_s=120 * 86400.0, across_node_factor=1.7,
                         variability="measured", first_decision_s=0.0, finish_at_round_end=True,
                         sia_philly_work="iterations")
WORLDS: dict[str, ReplayConfig] = {
    "pollux": ReplayConfig(),  # the Pollux artifact's simulator
    "pal": PAL_WORLD,
    # the Pollux world on PAL's measured variability and 4 racks with 2:1 oversubscribed uplinks
    "variability": ReplayConfig(racks=4, uplink_gbps=50.0, variability="measured"),
}


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
    if job.work_s is not None:  # a job of fixed work trains at its batch, up to the GPUs it scales to
        return _JobRules(job.batch_size, min(truth.max_bsz // truth.min_local_bsz, total_gpus))
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
    if model == "oracle" or job.work_s is not None:
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
        remaining_steps=(job.work_s - state.progress if job.work_s is not None
                         else remaining_steps(state, truth, rules.fixed_bsz)),
        freezing=_freeze_spec(state, truth, freezing),
        app_class=job.app_class,
    )


def work_speed(state: JobState, truth: ApplicationTruth, world: World, gpus_per_node: int) -> float:
    """Seconds of work per second of a job of fixed work on its GPUs: the measured scaling of its
    GPU count against the requested one (1 at the request), over its slowest GPU's true factor and
    the across-node factor."""
    job, r = state.job, len(state.gpus)
    scale = 1.0
    if r != job.num_replicas:
        packed = lambda n: tuple(min(gpus_per_node, n - k) for k in range(0, n, gpus_per_node))  # noqa: E731
        scale = (truth.step_time_s(packed(job.num_replicas), truth.split_fixed_batch(job.batch_size, job.num_replicas))
                 / truth.step_time_s(packed(r), truth.split_fixed_batch(job.batch_size, r)))
    cls = variability_class(job.application, job.app_class)
    return scale / (world.slowest(state.gpus, cls) * world.spread_factor(state.gpus))


def _step_scale(world: World, app_class: str):
    """(tau, sync scale, across-node factor) of a world's GPUs for the epoch model; None where the
    world changes nothing (so plain replays keep the measured times bit for bit)."""
    if world.plain:
        return None
    return lambda gpus: (world.slowest(gpus, app_class), world.sync_scale(gpus), world.spread_factor(gpus))


def replay(jobs: tuple[TraceJob, ...], policy: Policy, config: ReplayConfig = ReplayConfig(),
           on_round: Callable[[float, int], None] | None = None) -> ReplayResult:
    """Replay `jobs` under `policy`; `on_round(now_s, jobs_done)` is called after every round.

    BLAS runs single-threaded inside (one_blas_thread).
    """
    with one_blas_thread():
        return _replay(jobs, policy, config, on_round)


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """One BLAS thread: a replay's arrays are tiny, and OpenBLAS's idle workers spin, which made
    one replay cost 10x its CPU time when replays ran side by side. threadpoolctl limits only
    the libraries loaded so far, so scipy's (the online fits' L-BFGS-B), loaded where it is
    first used, is loaded first: without it a replay burnt a second core (16 CPU s for 9 s)."""
    importlib.import_module("scipy.optimize")
    with threadpool_limits(limits=1, user_api="blas"):
        yield


def _replay(jobs: tuple[TraceJob, ...], policy: Policy, config: ReplayConfig,
            on_round: Callable[[float, int], None] | None) -> ReplayResult:
    config.check()
    if not jobs:
        raise ConfigError("the workload has no jobs")
    model = config.throughput_model or policy.throughput_model
    world = World(*make_cluster(config.cluster_spec()))
    total = config.total_gpus
    too_big = [j for j in jobs if j.work_s is not None and j.num_replicas > total]
    if too_big:
        raise ConfigError(f"job {too_big[0].name} needs {too_big[0].num_replicas} GPUs, the cluster has {total}; "
                          "use a larger cluster")
    calibrated = dict(config.calibration)
    truths = {j.name: calibrated_truth(j.application, calibrated[j.application]) if j.application in calibrated
              else application_truth(j.application) for j in jobs}
    rules = {j.name: _rules(j, truths[j.name], policy, total) for j in jobs}
    agents = {j.name: JobAgent(truths[j.name], adaptive=policy.batch_mode == "adaptive" and rules[j.name].fixed_bsz is None)
              for j in jobs}
    states = {j.name: JobState(j) for j in jobs}
    scales = {j.name: _step_scale(world, variability_class(j.application, j.app_class)) for j in jobs}
    freezing = _opt_ins(jobs, config)
    rounds: list[dict] = []
    # Only live jobs (submitted, not done) cost anything in a round: a trace of 82k jobs over
    # 109 days has a few hundred at a time. Live jobs keep the trace's order, as rounds see them.
    order = {j.name: i for i, j in enumerate(jobs)}
    pending = collections.deque(sorted(order, key=lambda name: (states[name].job.submit_s, order[name])))
    live: dict[str, JobState] = {}
    done = idle_rounds = 0
    now = config.round_s if config.first_decision_s is None else config.first_decision_s
    while True:
        for name in [k for k, s in live.items() if s.done]:
            states[name] = replace(live.pop(name), gpus=())
        arrived = False
        while pending and states[pending[0]].job.submit_s <= now:
            name = pending.popleft()
            live[name] = states[name]
            arrived = True
        if arrived:
            live = dict(sorted(live.items(), key=lambda item: order[item[0]]))
        log = {"time_s": now, "active_jobs": len(live), "solve_ms": math.nan, "status": "", "objective": math.nan}
        if live:
            ri = RoundInput(world.seen, tuple(_job_spec(s, agents[s.job.name], truths[s.job.name], rules[s.job.name],
                                                        model, now, total, freezing.get(s.job.name))
                                              for s in live.values()),
                            round_s=config.round_s)
            t0 = time.perf_counter()
            result = policy.schedule(ri)
            log |= {"solve_ms": 1e3 * (time.perf_counter() - t0), "status": result.status,
                    "objective": result.objective}
            # every round of every replay, whatever the policy checked; budgets are the policy's
            # business (static_freeze ignores them by design): the summary counts violations
            verify(ri, result.allocations, budgets=False)
            for alloc in result.allocations:
                s = live[alloc.job_id]
                if set(alloc.gpus) != set(s.gpus):
                    bsz = alloc.total_bsz if policy.batch_mode == "allocated" else rules[alloc.job_id].fixed_bsz
                    s = reallocate(s, agents[alloc.job_id], alloc.gpus, bsz, config.restart_delay_s)
                live[alloc.job_id] = replace(s, frozen_groups=alloc.frozen_groups if alloc.job_id in freezing else 0)
        running = [s for s in live.values() if s.gpus]
        idle_rounds = idle_rounds + 1 if live and not running and not pending else 0
        if idle_rounds >= STUCK_ROUNDS:
            raise ConfigError(_stuck_message(policy, live, total, idle_rounds))
        log |= {"running_jobs": len(running), "gpus_used": sum(len(s.gpus) for s in running)}
        rounds.append(log)
        if on_round:
            on_round(now, done)
        if now >= config.horizon_s or not live and not pending:
            break
        live = {k: _advance(s, truths[k], agents[k], rules[k], now, config, freezing.get(k), scales[k], world)
                for k, s in live.items()}
        done += sum(s.done for s in live.values())
        now += config.round_s
    states |= live
    jobs_df = _jobs_frame(states, truths, config.gpus_per_node, freezing)
    rounds_df = pd.DataFrame(rounds)
    return ReplayResult(jobs_df, rounds_df, summarize(jobs_df, rounds_df, total, now) | _freeze_summary(jobs_df))


STUCK_ROUNDS = 3  # rounds an idle cluster may leave every waiting job waiting, with none to arrive


def _stuck_message(policy: Policy, live: dict[str, JobState], total_gpus: int, rounds: int) -> str:
    """Why a replay stops: nothing runs, nothing will arrive, and the policy places nobody."""
    largest = max(live.values(), key=lambda s: s.job.num_replicas).job
    waiting = f"{len(live)} job" + "s" * (len(live) > 1)
    return (f"the cluster ({total_gpus} GPUs) sat idle for {rounds} rounds with {waiting} waiting and none "
            f"left to arrive: {policy.name} gives them no GPUs, so they would wait forever (the largest, "
            f"{largest.name}, asks for {largest.num_replicas} GPUs); use a larger cluster or another policy")


def _advance(state: JobState, truth: ApplicationTruth, agent: JobAgent, rules: _JobRules, now_s: float,
             config: ReplayConfig, freezing: Freezing | None, scale, world: World) -> JobState:
    if state.job.work_s is not None:
        if not state.gpus or state.done:
            return state
        speed = work_speed(state, truth, world, config.gpus_per_node)
        return advance_work(state, speed, now_s, config.round_s, config.finish_at_round_end)
    return advance(state, truth, agent, rules.fixed_bsz, now_s, config.round_s, freezing, scale)


def _freeze_summary(jobs: pd.DataFrame) -> dict:
    """Penalty spent by the jobs that opted in to freezing, and how many overspent their budget."""
    opted = jobs[jobs.freeze_budget.notna()]
    return {"freeze_jobs": int(len(opted)),
            "penalty_mean": float(opted.penalty_spent.mean()) if len(opted) else 0.0,
            "penalty_max": float(opted.penalty_spent.max()) if len(opted) else 0.0,
            "budget_violations": int((opted.penalty_spent > opted.freeze_budget * (1 + 1e-9)).sum())}


def check_out_dir(out_dir: str | Path) -> Path:
    """The output folder, created now if needed: a bad --out fails before the replay, not after."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out}: is a file; give a folder for jobs.csv, rounds.csv and summary.json")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"--out {out}: cannot create it ({exc.strerror}); give a folder you can write") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise ConfigError(f"--out {out}: not writable; give a folder you can write")
    return out


def write_outputs(result: ReplayResult, out_dir: str | Path) -> None:
    """jobs.csv, rounds.csv and summary.json in `out_dir` (created if needed)."""
    out = check_out_dir(out_dir)
    spreadsheet_safe(result.jobs).to_csv(out / "jobs.csv", index=False)
    spreadsheet_safe(result.rounds).to_csv(out / "rounds.csv", index=False)
    (out / "summary.json").write_text(json_text(result.summary, indent=2) + "\n")


def _jobs_frame(states: dict[str, JobState], truths: dict[str, ApplicationTruth], gpus_per_node: int,
                freezing: dict[str, Freezing]) -> pd.DataFrame:
    rows = []
    for name, s in states.items():
        job, truth = s.job, truths[name]
        packed = tuple(min(gpus_per_node, job.num_replicas - k) for k in range(0, job.num_replicas, gpus_per_node))
        isolated = job.work_s if job.work_s is not None else isolated_time_s(truth, packed, job.batch_size)
        jct = s.completion_s - job.submit_s if s.completion_s is not None else math.nan
        rows.append({
            "name": name, "application": job.application, "submit_s": job.submit_s,
            "completion_s": s.completion_s if s.done else math.nan, "jct_s": jct,
            "num_replicas": job.num_replicas, "batch_size": job.batch_size, "restarts": s.num_restarts,
            "attained_gpu_s": s.attained_gpu_s, "epochs_done": s.epoch, "isolated_s": isolated,
            "ftf": jct / isolated if isolated > 0 else np.nan,
            "freeze_budget": freezing[name].budget if name in freezing else np.nan, "penalty_spent": s.penalty_spent,
            "app_class": job.app_class, "work_s": job.work_s,
        })
    return pd.DataFrame(rows)
