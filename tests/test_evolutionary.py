"""The ONES-style search: feasible, reproducible, and never above the MILP on the MILP's terms."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from schedlab.api import solve_round
from schedlab.bench import random_round
from schedlab.policies.evolutionary import Evolution, EvolutionConfig
from schedlab.policies.ones import OnesPolicy
from schedlab.verify import problems

MILP_TERMS = EvolutionConfig(fitness="milp", batch_rule="best", cap_growth=False, generations=30)


@pytest.mark.parametrize("seed", range(6))
def test_every_evolved_schedule_is_capacity_feasible(seed):
    ri = random_round(np.random.default_rng(seed), 16, 40)
    result = OnesPolicy(seed=seed).schedule(ri)
    assert problems(replace(ri, settings=OnesPolicy().settings), result.allocations) == []
    assert sum(a.num_gpus for a in result.allocations) <= ri.cluster.total_gpus


def test_same_seed_same_schedule():
    ri = random_round(np.random.default_rng(4), 16, 30)
    a = OnesPolicy(seed=7).schedule(ri)
    b = OnesPolicy(seed=7).schedule(ri)
    assert a.allocations == b.allocations


@pytest.mark.parametrize("seed", range(8))
def test_search_never_beats_the_milp_optimum_on_its_own_terms(seed):
    # Same configuration space, same values (MILP fitness, best batch): the MILP optimum bounds
    # every schedule the search can reach; exceeding it would mean a bug in one of them.
    ri = random_round(np.random.default_rng(100 + seed), 16, 30)
    exact = solve_round(ri)
    assert exact.status == "optimal"
    chosen, _, vals, _ = Evolution(MILP_TERMS, np.random.default_rng(seed)).search(ri)
    found = sum(vals.objective[c] if c >= 0 else vals.opts.U0[j] for j, c in enumerate(chosen))
    assert found <= exact.objective + 1e-6 * abs(exact.objective)
    assert found >= exact.objective - 0.5 * abs(exact.objective)  # and it is a real search


@pytest.mark.parametrize("seed", range(6))
def test_a_job_that_keeps_its_size_keeps_its_gpus(seed):
    # The reorder step: a running job is only moved when its GPU count changes.
    ri = random_round(np.random.default_rng(200 + seed), 32, 24)
    result = OnesPolicy(seed=seed).schedule(ri)
    current = {j.id: set(j.current_gpus) for j in ri.jobs}
    for a in result.allocations:
        if current[a.job_id] and len(a.gpus) == len(current[a.job_id]):
            assert set(a.gpus) == current[a.job_id], a.job_id


def test_gpu_cap_doubles_with_age_from_the_request():
    ri = random_round(np.random.default_rng(3), 64, 4, running_fraction=0.0)
    young = [replace(j, age_s=0.0, requested_gpus=1, max_gpus=16) for j in ri.jobs]
    old = [replace(j, age_s=2 * 600.0, requested_gpus=1, max_gpus=16) for j in ri.jobs]
    for jobs, cap in ((young, 1), (old, 4)):
        result = OnesPolicy(seed=0).schedule(replace(ri, jobs=tuple(jobs)))
        sizes = [len(a.gpus) for a in result.allocations]
        assert max(sizes) == cap, sizes  # the cluster is nearly empty: every job grows to its cap
