"""Partitioned solving (schedlab.partition, POP): every job placed once, running jobs keep their
part, the merged answer is valid and close to the unpartitioned optimum."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from conftest import tiny_round

from schedlab.api import solve_round
from schedlab.bench import random_round
from schedlab.errors import InputError
from schedlab.formulations.goodput import allocation_objective
from schedlab.formulations.options import enumerate_options
from schedlab.io import round_input_to_dict
from schedlab.partition import PARTITIONED, auto_partitions, split_round
from schedlab.state import Settings


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


def test_local_processes_give_the_same_answer_as_an_executor(medium_round):
    with ThreadPoolExecutor(2) as pool:
        threads = solve_round(medium_round, partitions=2, executor=pool)
    processes = solve_round(medium_round, partitions=2)
    assert processes.allocations == threads.allocations


def test_partitions_are_chosen_from_the_round_size_and_validated():
    small = tiny_round(np.random.default_rng(0))
    assert auto_partitions(small) == 1
    big = random_round(np.random.default_rng(0), 64, 20_001)
    assert auto_partitions(big) == 3
    raw = round_input_to_dict(small)
    raw["settings"]["partitions"] = -2
    with pytest.raises(InputError) as err:
        solve_round(raw)
    assert any("settings.partitions" in p for p in err.value.problems)
