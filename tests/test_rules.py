"""The rules of the domain, each written once beside its dataclass, and every policy following it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from schedlab.api import solve_round
from schedlab.models.efficiency import split_fixed_batch
from schedlab.models.profiles import shipped_profiles
from schedlab.policies import make_policy
from schedlab.state import Cluster, GpuRef, JobSpec, Node, RoundInput, Settings


def _job(**fields) -> JobSpec:
    prof = shipped_profiles()["cifar10"]
    return JobSpec("a", {"default": prof.params}, prof.grad_stats, prof.batch, min_gpus=1, max_gpus=8,
                   application="cifar10", **fields)


def test_the_submitted_batch_is_the_fixed_then_the_requested_then_the_initial_batch():
    job = _job(requested_gpus=2, requested_bsz=256)
    assert job.submitted_bsz == 256
    assert replace(job, fixed_bsz=512).submitted_bsz == 512
    assert replace(job, requested_bsz=None).submitted_bsz == job.batch.init_bsz


def test_gang_size_is_the_request_else_the_minimum():
    assert _job(requested_gpus=4).gang_gpus == 4
    assert replace(_job(), min_gpus=2).gang_gpus == 2


def test_a_job_restarts_only_when_it_runs_elsewhere():
    here = (GpuRef("n0", 0), GpuRef("n0", 1))
    running = _job(current_gpus=here)
    assert not running.restarted_on(tuple(reversed(here)))
    assert running.restarted_on((GpuRef("n0", 0),))
    assert not _job().restarted_on(here)


def test_the_fair_share_is_the_cluster_over_its_jobs_rounded_up():
    cluster = Cluster((Node("n0", 4), Node("n1", 3)))
    assert RoundInput(cluster, (_job(), replace(_job(), id="b"))).fair_share_gpus == 4
    assert RoundInput(cluster, ()).fair_share_gpus == 7


@pytest.mark.parametrize("how", ["tiresias", "fifo", "placement"])
def test_fixed_batch_policies_train_at_the_requested_batch_when_none_is_fixed(how):
    """Without fixed_bsz, the gang baselines and PAL's placement train at the user's requested_bsz
    (the two copies of this rule once disagreed: the baselines took the initial batch)."""
    job = _job(requested_gpus=2, requested_bsz=256)
    assert job.batch.init_bsz != 256
    ri = RoundInput(Cluster((Node("n0", 4),)), (job,))
    if how == "placement":
        result = solve_round(replace(ri, settings=Settings(formulation="placement")))
    else:
        result = make_policy(how).schedule(ri)
    micro, accum = split_fixed_batch(256, 2, job.batch)
    alloc = result.allocation("a")
    assert (alloc.num_gpus, alloc.local_bsz, alloc.accum_steps) == (2, micro, accum)
    assert alloc.total_bsz == 2 * micro * (accum + 1)


@pytest.mark.parametrize("policy", ["joint", "pollux"])
def test_a_gang_the_round_cannot_place_runs_on_the_fewest_gpus_above_it(policy):
    """A 6-GPU gang on 4-GPU nodes is neither one node nor whole nodes: it runs on 8 (else it
    would wait for ever, and a replay of it would never end); a 2-GPU gang runs on exactly 2."""
    nodes = tuple(Node(f"n{k}", 4) for k in range(4))
    jobs = (replace(_job(requested_gpus=6), id="six"), replace(_job(requested_gpus=2), id="two"))
    result = make_policy(policy, {"gang": True}).schedule(RoundInput(Cluster(nodes), jobs, Settings()))
    assert [a.num_gpus for a in result.allocations] == [8, 2]


@pytest.mark.parametrize("policy", ["joint", "pollux"])
def test_a_gang_whose_fixed_batch_does_not_split_over_the_gpus_above_it_runs_on_those_below(policy):
    """Sia-Philly's 6-GPU jobs at a fixed batch of 192, at least 32 a GPU: over 8 GPUs that is 24
    a GPU, so such a gang runs on one node of 4 (48 a GPU); before, it was sized to 8, had no
    option, and a replay in PAL's world idled with every such job waiting. An adaptive batch
    keeps the fewest GPUs above the gang."""
    nodes = tuple(Node(f"n{k}", 4) for k in range(4))
    batch = replace(_job().batch, min_local_bsz=32, max_local_bsz=1024)
    fixed = replace(_job(requested_gpus=6, fixed_bsz=192), id="fixed", batch=batch)
    adaptive = replace(_job(requested_gpus=6), id="adaptive", batch=batch)
    result = make_policy(policy, {"gang": True}).schedule(RoundInput(Cluster(nodes), (fixed, adaptive), Settings()))
    assert {a.job_id: a.num_gpus for a in result.allocations} == {"fixed": 4, "adaptive": 8}
    assert result.allocation("fixed").local_bsz * (result.allocation("fixed").accum_steps + 1) == 48
