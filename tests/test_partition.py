"""Partitioned solving (schedlab.partition, POP): every job placed once, running jobs keep their
part, joint rounds keep racks whole, the merged answer is valid and close to the unpartitioned
optimum, and its bound is the sum of its parts'."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import numpy as np
import pytest
from conftest import tiny_round

from schedlab.api import solve_round
from schedlab.bench import random_round
from schedlab.bench.latency import _loss_vs_lp_bound, _scale_row
from schedlab.clusters import ClusterSpec, make_cluster
from schedlab.errors import InputError
from schedlab.formulations import FORMULATIONS
from schedlab.formulations.goodput import allocation_objective
from schedlab.formulations.options import enumerate_options
from schedlab.io import round_input_to_dict
from schedlab.partition import PARTITIONED, auto_partitions, split_round
from schedlab.solvers.highs_direct import lp_bound
from schedlab.state import GpuRef, Settings
from schedlab.verify import verify


@pytest.fixture(scope="module")
def medium_round():
    return random_round(np.random.default_rng(4), 512, 256, settings=Settings(p=-1.0))


def test_split_places_every_job_once_and_never_splits_a_running_job(medium_round):
    parts = split_round(medium_round, 4)
    assert len(parts) == 4
    ids = [job.id for part in parts for job in part.jobs]
    assert sorted(ids) == sorted(job.id for job in medium_round.jobs)
    assert sum(p.cluster.total_gpus for p in parts) == medium_round.cluster.total_gpus
    original = {job.id: job for job in medium_round.jobs}
    for part in parts:
        node_ids = {n.id for n in part.cluster.nodes}
        for job in part.jobs:
            assert job.current_gpus == original[job.id].current_gpus  # running jobs can stay
            assert {g.node for g in job.current_gpus} <= node_ids
    shares = [p.cluster.total_gpus / len(p.jobs) for p in parts]
    assert max(shares) / min(shares) < 1.2  # every part a scaled-down copy of the round


def test_partitioned_answer_is_valid_and_near_the_unpartitioned_optimum(medium_round):
    whole = solve_round(medium_round, partitions=1)
    with ThreadPoolExecutor(2) as pool:
        split = solve_round(medium_round, partitions=4, executor=pool)
    assert whole.status == "optimal" and split.status == PARTITIONED and split.verified
    assert [a.job_id for a in split.allocations] == [job.id for job in medium_round.jobs]
    full = enumerate_options(medium_round, prune=False)
    assert allocation_objective(full, whole.allocations) == pytest.approx(whole.objective, rel=1e-9)
    value = allocation_objective(full, split.allocations)
    assert value <= whole.bound + 1e-9 * abs(whole.bound)
    assert value >= whole.objective - 0.01 * abs(whole.objective)  # POP's loss: within 1 %
    # the scale table values the merged answer in the whole round's model, against its LP bound
    bound = lp_bound(FORMULATIONS["goodput"](medium_round).arrays())
    assert _loss_vs_lp_bound(medium_round, split) == pytest.approx((bound - value) / abs(value), rel=1e-9)


def test_local_processes_give_the_same_answer_as_an_executor(medium_round):
    with ThreadPoolExecutor(2) as pool:
        threads = solve_round(medium_round, partitions=2, executor=pool)
    processes = solve_round(medium_round, partitions=2)
    assert processes.allocations == threads.allocations


def test_partitions_are_chosen_from_the_round_size_and_validated():
    small = tiny_round(np.random.default_rng(0))
    assert auto_partitions(small) == 1
    big = random_round(np.random.default_rng(0), 64, 16_001)
    assert auto_partitions(big) == 2  # goodput: parts of up to 10,000 jobs
    joint = replace(big, settings=Settings(formulation="joint"))
    assert auto_partitions(joint) == 16  # joint's cost more: parts of 1,000 jobs, but at most one a node
    raw = round_input_to_dict(small)
    raw["settings"]["partitions"] = -2
    with pytest.raises(InputError) as err:
        solve_round(raw)
    assert any("settings.partitions" in p for p in err.value.problems)


@pytest.fixture(scope="module")
def racked_round():
    """40 jobs on 16 nodes of 4 GPUs in 4 racks of 4 nodes, PAL's measured variability; one
    running job holds a GPU on each side of the boundary between racks r1 (n4-n7) and r2."""
    cluster = make_cluster(ClusterSpec(16, 4, racks=4, variability="measured", seed=0))[0]
    ri = replace(random_round(np.random.default_rng(3), 64, 40, running_fraction=0.0,
                              settings=Settings(formulation="joint")), cluster=cluster)
    spanning = replace(ri.jobs[0], current_gpus=(GpuRef("n7", 0), GpuRef("n8", 0)), age_s=3600.0)
    return replace(ri, jobs=(spanning, *ri.jobs[1:]))


@pytest.mark.parametrize("k, expected", [(2, 2), (3, 3), (4, 3)])
def test_joint_parts_keep_racks_whole_and_running_jobs_with_their_gpus(racked_round, k, expected):
    parts = split_round(racked_round, k)
    assert len(parts) == expected  # no cut between r1 and r2, which a running job spans
    racks = {rack.id: set(rack.nodes) for rack in racked_round.cluster.topology.racks}
    for part in parts:
        nodes = {n.id for n in part.cluster.nodes}
        held = [rack for rack, members in racks.items() if members & nodes]
        assert set().union(*(racks[r] for r in held)) == nodes  # whole racks, nothing else
        assert {r.id for r in part.cluster.topology.racks} == set(held)
        for job in part.jobs:
            assert {g.node for g in job.current_gpus} <= nodes
    assert sorted(j.id for p in parts for j in p.jobs) == sorted(j.id for j in racked_round.jobs)


def test_goodput_cuts_nodes_as_without_racks(racked_round):
    """Goodput prices no topology: its parts are cut between nodes, racks or not."""
    ri = replace(racked_round, settings=Settings(formulation="goodput"))
    flat = replace(ri, cluster=replace(ri.cluster, topology=None))
    node_ids = lambda parts: [[n.id for n in p.cluster.nodes] for p in parts]  # noqa: E731
    assert node_ids(split_round(ri, 3)) == node_ids(split_round(flat, 3))
    assert any(len(p.cluster.nodes) % 4 for p in split_round(ri, 3))  # a rack is cut


def test_a_partitioned_joint_round_verifies_and_is_bounded_by_its_parts_lp_bounds(racked_round):
    """Each part's HiGHS stopped at once (its own time_limit 0): each part's bound is its LP
    relaxation's, and the round's their sum."""
    with ThreadPoolExecutor(1) as pool:
        res = solve_round(racked_round, partitions=2, solver="highs", solver_options={"time_limit": 0.0}, executor=pool)
    verify(racked_round, res.allocations)
    assert res.status == PARTITIONED and not res.bound_timed_out
    parts = split_round(racked_round, 2)
    assert res.bound == pytest.approx(sum(lp_bound(FORMULATIONS["joint"](p).arrays()) for p in parts), rel=1e-9)
    assert res.bound >= res.objective and res.gap == pytest.approx((res.bound - res.objective) / abs(res.objective))


def test_the_scale_table_runs_joint_rounds_on_racks_against_their_lp_bound():
    row = _scale_row(64, 32, 2, 0, 10.0, "joint", 4, "measured")
    assert (row["formulation"], row["racks"], row["variability"], row["partitions"]) == ("joint", 4, "measured", 1)
    assert set(row["status_counts"]) == {"optimal"} and 0 <= row["gap_vs_lp_max"] < 0.05


@pytest.mark.parametrize("freeze_fraction", [0.0, 0.5])
def test_goodput_values_an_answer_as_its_model_does(freeze_fraction):
    """The registry's value of an allocation (what a partitioned answer is measured by) is the
    whole round's objective at it, freeze levels included."""
    ri = random_round(np.random.default_rng(5), 128, 64, settings=Settings(), freeze_fraction=freeze_fraction)
    res = solve_round(ri, partitions=1)
    assert FORMULATIONS["goodput"].value(ri, res.allocations) == pytest.approx(res.objective, rel=1e-9)
