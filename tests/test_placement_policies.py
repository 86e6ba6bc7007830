"""Placement policies in the one registry: PAL's queue, the placements, and compositions ALLOC+PLACE."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from schedlab.errors import ConfigError
from schedlab.models.profiles import shipped_profiles
from schedlab.policies import ALLOCATORS, PLACERS, POLICIES, make_policy, policy_names
from schedlab.policies.placement import pal_queue
from schedlab.state import Cluster, GpuRef, JobSpec, Node, RoundInput, Topology
from schedlab.verify import verify

SLOW = GpuRef("n0", 0)  # three times slower than any other GPU, for every class


def cluster_4x4(seed: int = 0) -> Cluster:
    """4 nodes x 4 GPUs, slowdowns in [1, 1.2] per class, SLOW at 3, across-node factor 1.7."""
    rng = np.random.default_rng(seed)
    nodes = []
    for n in range(4):
        slowdown = {c: tuple(3.0 if GpuRef(f"n{n}", k) == SLOW else float(rng.uniform(1.0, 1.2)) for k in range(4))
                    for c in ("classA", "classB")}
        nodes.append(Node(f"n{n}", 4, slowdown=slowdown))
    return Cluster(tuple(nodes), Topology(across_node_factor=1.7))


def job(job_id: str, gpus: int, age_s: float, application: str = "cifar10", **fields) -> JobSpec:
    """A job asking for `gpus` GPUs at a batch of its minimum local batch on each."""
    prof = shipped_profiles()[application]
    return JobSpec(job_id, {"default": prof.params}, prof.grad_stats, prof.batch, min_gpus=1, max_gpus=16,
                   age_s=age_s, requested_gpus=gpus, requested_bsz=gpus * prof.batch.min_local_bsz,
                   fixed_bsz=gpus * prof.batch.min_local_bsz, application=application, **fields)


def loaded_round(seed: int = 0) -> RoundInput:
    """12 of 16 GPUs asked for by five jobs of two classes, two of them running."""
    jobs = (job("a", 4, 500.0, current_gpus=tuple(GpuRef("n1", k) for k in range(4))),
            job("b", 4, 400.0, "bert"), job("c", 2, 300.0, current_gpus=(SLOW, GpuRef("n2", 3))),
            job("d", 1, 200.0, "bert"), job("e", 1, 100.0))
    return RoundInput(cluster_4x4(seed), jobs)


def gpus_of(result) -> dict[str, tuple[GpuRef, ...]]:
    return {a.job_id: a.gpus for a in result.allocations}


@pytest.mark.parametrize("name", sorted(PLACERS))
def test_every_placement_policy_places_the_queue_and_verifies(name):
    ri = loaded_round()
    policy = make_policy(name)
    assert (policy.batch_mode, policy.throughput_model) == ("fixed", "oracle")
    result = policy.schedule(ri)
    verify(ri, result.allocations)
    assert result.verified and result.status in ("heuristic", "optimal", "time_limit")
    assert {a.job_id: a.num_gpus for a in result.allocations} == {j.id: j.requested_gpus for j in ri.jobs}
    assert all(a.total_bsz == j.fixed_bsz for a, j in zip(result.allocations, ri.jobs))


def test_pal_avoids_a_very_slow_gpu_when_it_can():
    result = make_policy("pal").schedule(loaded_round())
    assert all(SLOW not in gpus for gpus in gpus_of(result).values())
    assert all(a.speedup >= 1 / 1.2 for a in result.allocations)  # none spread, none on SLOW


def test_the_queue_stops_at_the_first_job_that_does_not_fit_unless_backfilling():
    ri = RoundInput(cluster_4x4(), (job("old", 12, 300.0), job("big", 8, 200.0), job("small", 2, 100.0)))
    assert pal_queue(ri, "fifo") == {"old": 12}
    assert pal_queue(ri, "fifo", backfill=True) == {"old": 12, "small": 2}
    assert {k: len(v) for k, v in gpus_of(make_policy("pal").schedule(ri)).items()} == {"old": 12, "big": 0, "small": 0}
    backfilled = make_policy("pal", {"backfill": True}).schedule(ri)
    assert {k: len(v) for k, v in gpus_of(backfilled).items()} == {"old": 12, "big": 0, "small": 2}


def test_queue_orders_follow_pal():
    ri = RoundInput(cluster_4x4(), (job("x", 8, 300.0, attained_service_gpu_s=9.0, remaining_steps=5.0),
                                    job("y", 8, 200.0, attained_service_gpu_s=1.0, remaining_steps=None),
                                    job("z", 8, 100.0, attained_service_gpu_s=5.0, remaining_steps=1.0)))
    assert list(pal_queue(ri, "fifo")) == ["x", "y"]
    assert list(pal_queue(ri, "las")) == ["y", "z"]
    assert list(pal_queue(ri, "srtf")) == ["z", "x"]  # an unknown remaining time goes last
    with pytest.raises(ConfigError, match="order 'sjf': use one of fifo, las, srtf"):
        make_policy("pal", {"order": "sjf"})


def test_exact_placement_is_never_worse_than_pal():
    for seed in range(3):
        ri = loaded_round(seed)
        exact, greedy = make_policy("milp").schedule(ri), make_policy("pal").schedule(ri)
        assert exact.status == "optimal"
        assert exact.objective >= greedy.objective - 1e-9


def test_random_placement_is_seeded():
    ri = loaded_round()
    first, again = make_policy("random", {"seed": 3}).schedule(ri), make_policy("random", {"seed": 3}).schedule(ri)
    assert gpus_of(first) == gpus_of(again)


@pytest.mark.parametrize("alloc", ["tiresias", "fifo", "pollux"])
def test_a_composition_keeps_the_allocation_and_places_its_jobs(alloc):
    ri = loaded_round()
    allocated, composed = make_policy(alloc).schedule(ri), make_policy(f"{alloc}+pal")
    assert (composed.name, composed.batch_mode, composed.throughput_model) == (
        f"{alloc}+pal", POLICIES[alloc].batch_mode, POLICIES[alloc].throughput_model)
    result = composed.schedule(ri)
    verify(ri, result.allocations)
    for before, after in zip(allocated.allocations, result.allocations):
        assert (after.num_gpus, after.total_bsz, after.local_bsz, after.accum_steps) == (
            before.num_gpus, before.total_bsz, before.local_bsz, before.accum_steps)
    assert all(SLOW not in gpus for gpus in gpus_of(result).values())
    assert result.status == allocated.status and "placement pal: heuristic" in result.message


def test_tiresias_alone_lands_on_the_slow_gpu_that_tiresias_pal_avoids():
    ri = loaded_round()
    assert any(SLOW in gpus for gpus in gpus_of(make_policy("tiresias").schedule(ri)).values())
    assert all(SLOW not in gpus for gpus in gpus_of(make_policy("tiresias+pal").schedule(ri)).values())


def test_composition_names_and_params():
    composed = make_policy("tiresias+milp", {"alloc": {"threshold_gpu_s": 60.0}, "place": {"time_limit_s": 0.5}})
    assert (composed.alloc.threshold_gpu_s, composed.place.time_limit_s) == (60.0, 0.5)
    assert "tiresias+pal" in policy_names() and "pal" in policy_names()
    assert len(policy_names()) == len(POLICIES) + len(ALLOCATORS) * len(PLACERS)
    for bad in ("pal+tiresias", "tiresias+pollux", "tiresias+pal+pal", "nope"):
        with pytest.raises(ConfigError, match=r"use one of .*, or ALLOC\+PLACE with ALLOC one of .* and PLACE one of"):
            make_policy(bad)
    with pytest.raises(ConfigError, match="tiresias\\+pal: unknown parameter 'order'"):
        make_policy("tiresias+pal", {"order": "las"})


def test_placement_objective_is_every_running_jobs_speed():
    result = make_policy("pal").schedule(loaded_round())
    assert result.objective == pytest.approx(sum(a.speedup for a in result.allocations))
    assert math.isnan(result.bound)


def mixed_round() -> RoundInput:
    """n0, n1 of four v100 each and n2, n3 of four k80 (slowdowns as cluster_4x4's); cifar10 jobs
    run on both types, three times slower in compute on k80; the bert jobs have parameters for k80
    only. FIFO: a (v100 or k80, 4), b (k80 only, 4), c (both, 6), d (k80 only, 2), e (both, 1)."""
    nodes = tuple(replace(n, gpu_type="v100" if k < 2 else "k80") for k, n in enumerate(cluster_4x4().nodes))
    out = []
    for j in (job("a", 4, 500.0), job("b", 4, 400.0, "bert"), job("c", 6, 300.0), job("d", 2, 200.0, "bert"),
              job("e", 1, 100.0)):
        params = j.throughput["default"]
        slow = replace(params, alpha_c=3 * params.alpha_c, beta_c=3 * params.beta_c)
        out.append(replace(j, throughput={"k80": slow} if j.application == "bert" else {"v100": params, "k80": slow}))
    return RoundInput(Cluster(nodes, cluster_4x4().topology), tuple(out))


@pytest.mark.parametrize("name", sorted(PLACERS))
def test_every_placement_policy_puts_each_job_on_one_type_it_can_run_on(name):
    ri = mixed_round()
    result = make_policy(name).schedule(ri)
    verify(ri, result.allocations)
    type_of = {n.id: n.gpu_type for n in ri.cluster.nodes}
    jobs = {j.id: j for j in ri.jobs}
    for a in result.allocations:
        kinds = {type_of[g.node] for g in a.gpus}
        assert len(kinds) <= 1 and kinds <= jobs[a.job_id].throughput.keys(), (a.job_id, kinds)
    placed = {a.job_id for a in result.allocations if a.gpus}
    assert placed == set(pal_queue(ri, "fifo"))


def test_the_queue_counts_each_types_gpus():
    """a counts against v100, where it is fastest, b against k80; the 8 GPUs left would hold c's
    6 but no type has 6 left, so c stops the queue; with backfill d takes k80 and e v100."""
    ri = mixed_round()
    assert pal_queue(ri, "fifo") == {"a": 4, "b": 4}
    assert pal_queue(ri, "fifo", backfill=True) == {"a": 4, "b": 4, "d": 2, "e": 1}
    result = make_policy("milp").schedule(ri)
    assert result.status == "optimal"
    on = {a.job_id: {g.node for g in a.gpus} for a in result.allocations}
    assert on["a"] <= {"n0", "n1"} and on["b"] <= {"n2", "n3"}
