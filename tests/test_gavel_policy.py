"""Gavel's round mechanism (policies.gavel) on a small cluster of two GPU types, round by round."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from schedlab.clusters import ClusterSpec, NodePool, make_cluster
from schedlab.errors import ConfigError
from schedlab.formulations.gavel import gavel_input, isolated_throughput
from schedlab.models.efficiency import submitted_split
from schedlab.models.profiles import shipped_profiles
from schedlab.models.throughput import step_time_s
from schedlab.policies import make_policy
from schedlab.policies.gavel import GavelLasPolicy
from schedlab.state import Cluster, JobAllocation, JobSpec, RoundInput, ThroughputParams

ROUND_S = 360.0  # Gavel's round
CLUSTER = make_cluster(ClusterSpec(pools=(NodePool("v100", 2, 4), NodePool("k80", 2, 4))))[0]


def _slower(params: ThroughputParams, factor: float) -> ThroughputParams:
    """The same job on a GPU `factor` times slower at computing."""
    return replace(params, alpha_c=params.alpha_c * factor, beta_c=params.beta_c * factor)


def _job(i: int, application: str, gang_gpus: int, k80_slowdown: float) -> JobSpec:
    prof = shipped_profiles()[application]
    return JobSpec(id=f"{application}-{i}", throughput={"v100": prof.params, "k80": _slower(prof.params, k80_slowdown)},
                   grad_stats=prof.grad_stats, batch=prof.batch, min_gpus=gang_gpus, max_gpus=gang_gpus,
                   requested_gpus=gang_gpus, requested_bsz=prof.batch.init_bsz * gang_gpus, application=application)


def _jobs() -> list[JobSpec]:
    """Twelve jobs of 1, 2 and 4 GPUs: half barely slower on a K80, half 5 times slower."""
    apps = ["cifar10", "imagenet", "bert", "ncf"]
    return [_job(i, apps[i % 4], (1, 2, 4)[i % 3], 1.1 if i % 2 else 5.0) for i in range(12)]


def _type_of(cluster: Cluster, allocation: JobAllocation) -> set[str]:
    kinds = {n.id: n.gpu_type for n in cluster.nodes}
    return {kinds[g.node] for g in allocation.gpus}


def _steps_per_s(job: JobSpec, cluster: Cluster, allocation: JobAllocation) -> float:
    """What the job really runs at on its allocation (its nodes counted: unconsolidated is slower)."""
    (gpu_type,) = _type_of(cluster, allocation)
    micro, accum = submitted_split(job, allocation.num_gpus)
    return float(1.0 / step_time_s(job.throughput[gpu_type], allocation.num_nodes, allocation.num_gpus, micro, accum))


def _replay(policy, jobs: list[JobSpec], steps: dict[str, float], rounds: int = 400) -> tuple[dict[str, float], list]:
    """Every job arrives at 0 with `steps` to run; each round the policy allocates and jobs
    progress at their true rates. Returns each job's completion time and every round's result."""
    left, gpus, done, results = dict(steps), {}, {}, []
    by_id = {j.id: j for j in jobs}
    for k in range(rounds):
        live = tuple(replace(j, current_gpus=gpus.get(j.id, ()), remaining_steps=left[j.id], age_s=k * ROUND_S)
                     for j in jobs if j.id not in done)
        if not live:
            break
        result = policy.schedule(RoundInput(CLUSTER, live, round_s=ROUND_S))
        results.append(result)
        gpus = {a.job_id: a.gpus for a in result.allocations}
        for a in result.allocations:
            if a.gpus:
                rate = _steps_per_s(by_id[a.job_id], CLUSTER, a)
                if left[a.job_id] <= rate * ROUND_S:
                    done[a.job_id] = k * ROUND_S + left[a.job_id] / rate
                left[a.job_id] -= rate * ROUND_S
    return done, results


@pytest.mark.parametrize("gangs, num_jobs", [((1,), 20), ((1, 2), 12)])
def test_the_received_shares_converge_to_the_time_fractions(gangs, num_jobs):
    # More GPUs wanted than the 16 there are: every round some jobs wait. (Gangs of 4 among
    # smaller ones may not realize X exactly: the LP's capacity is fluid, a round's is not.)
    apps = ["cifar10", "imagenet", "bert", "ncf"]
    jobs = tuple(_job(i, apps[i % 4], gangs[i % len(gangs)], 1.1 if i % 2 else 5.0) for i in range(num_jobs))
    policy = GavelLasPolicy()
    ri = RoundInput(CLUSTER, jobs, round_s=ROUND_S)
    x, _ = policy.time_fractions(ri, gavel_input(ri))
    for _ in range(400):
        result = policy.schedule(ri)
        ri = replace(ri, jobs=tuple(replace(j, current_gpus=result.allocation(j.id).gpus) for j in jobs))
    assert policy.received(gavel_input(ri)) == pytest.approx(x, abs=0.02)
    assert ((x > 0.05) & (x < 0.95)).any()  # X is not all-or-nothing: the mechanism had to share


@pytest.mark.parametrize("name", ["gavel_las", "gavel_las_agnostic", "gavel_makespan", "gavel_ftf"])
def test_a_job_runs_its_whole_gang_on_one_type_and_every_job_finishes(name):
    jobs = _jobs()
    done, results = _replay(make_policy(name), jobs, {j.id: 3000.0 for j in jobs})
    assert set(done) == {j.id for j in jobs}
    by_id = {j.id: j for j in jobs}
    for result in results:
        assert result.verified
        for a in result.allocations:
            assert not a.gpus or (len(_type_of(CLUSTER, a)) == 1 and a.num_gpus == by_id[a.job_id].gang_gpus)


@pytest.mark.parametrize("name", ["gavel_las", "gavel_las_agnostic", "gavel_makespan", "gavel_ftf"])
def test_a_gang_that_fits_on_one_node_gets_one_node_and_keeps_its_gpus(name):
    jobs = [_job(i, "cifar10", g, 2.0) for i, g in enumerate((4, 2, 1, 1))]  # 8 GPUs wanted of 16
    _, results = _replay(make_policy(name), jobs, {j.id: 1e9 for j in jobs}, rounds=10)
    assert all(a.num_nodes == 1 for a in results[0].allocations)
    # every job runs every round, so none is ever moved (type and GPUs kept)
    assert not any(a.restarted for result in results[1:] for a in result.allocations)


def test_heterogeneity_awareness_shortens_the_mean_jct_and_the_makespan_policy_the_makespan():
    # Half the jobs run 5x slower on a K80, half 1.1x: the aware LAS keeps the first half on the
    # V100s (mean JCT 2,710 s against the agnostic's 4,072 s, 0.67 x); the makespan policy finishes
    # the last job first (6,818 s against 11,026 s and 16,574 s).
    jobs = _jobs()
    steps = {j.id: 2000.0 * (1 + i % 3) for i, j in enumerate(jobs)}
    done = {name: _replay(make_policy(name), jobs, steps)[0] for name in ("gavel_las", "gavel_las_agnostic",
                                                                          "gavel_makespan")}
    jct = {name: np.mean(list(d.values())) for name, d in done.items()}
    assert jct["gavel_las"] < 0.95 * jct["gavel_las_agnostic"]
    makespan = {name: max(d.values()) for name, d in done.items()}
    assert makespan["gavel_makespan"] < min(makespan["gavel_las"], makespan["gavel_las_agnostic"])


def test_the_lp_is_solved_by_any_lp_solver_of_the_registry_and_refused_to_one_that_is_not():
    ri = RoundInput(CLUSTER, tuple(_jobs()), round_s=ROUND_S)
    by_highs = make_policy("gavel_las").schedule(ri)
    assert make_policy("gavel_las", {"solver": "appsi_highs"}).schedule(ri).message == by_highs.message  # z, 6 digits
    with pytest.raises(ConfigError, match="outside the LP"):
        make_policy("gavel_las", {"solver": "cpsat"}).schedule(ri)


def test_finish_time_fairness_counts_the_seconds_a_jobs_progress_would_have_taken_alone():
    job = _job(0, "cifar10", 1, 2.0)
    policy = make_policy("gavel_ftf")
    _, results = _replay(policy, [job], {job.id: 1e9}, rounds=3)
    done = sum(_steps_per_s(job, CLUSTER, r.allocations[0]) * ROUND_S for r in results)
    inp = gavel_input(RoundInput(CLUSTER, (replace(job, remaining_steps=1e9 - done),)))
    # alone, Gavel's isolated share of the cluster is half of each type (rows capped at 1)
    assert policy.isolated_s(inp)[0] == pytest.approx(done / isolated_throughput(inp)[0])
    assert done / isolated_throughput(inp)[0] > 3 * ROUND_S  # it ran on the V100s, faster than alone


def test_priorities_put_the_jobs_behind_their_share_first():
    from schedlab.policies.gavel import priorities

    p = priorities(np.array([[0.5, 0.0], [0.5, 0.2]]), np.array([[0.25, 0.0], [0.0, 0.4]]))
    assert p.tolist() == [[2.0, 0.0], [math.inf, 0.5]]
