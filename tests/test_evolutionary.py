"""The ONES-style search: feasible, reproducible, and never above the MILP on the MILP's terms."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from schedlab.api import solve_round
from schedlab.bench import random_round
from schedlab.policies.ones import OnesPolicy
from schedlab.solvers.evolutionary import Evolution, EvolutionConfig
from schedlab.verify import problems

MILP_TERMS = EvolutionConfig(fitness="milp", batch_rule="best", generations=30)


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
