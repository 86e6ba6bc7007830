"""Layer freezing: profiles from the architectures, our penalty model's calibration, the round
model's budget and objective guarantees, its input checks, and the replay with freezing."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest
from conftest import tiny_round
from hypothesis import given
from hypothesis import strategies as st

from schedlab import solve_round
from schedlab.bench import random_round
from schedlab.errors import InputError
from schedlab.io import parse_round_input, round_input_to_dict
from schedlab.models.freezing import (
    PROFILES,
    frozen_fraction,
    geometric_frozen_groups,
    layer_profile,
    linear_schedule_speedup_and_penalty,
    penalty,
)
from schedlab.policies import make_policy
from schedlab.sim.engine import replay
from schedlab.sim.world import ReplayConfig
from schedlab.state import FreezePenalty, FreezeSpec
from schedlab.traces import synthetic_workload, trace_jobs


@pytest.mark.parametrize("application, published_m", [
    ("cifar10", 11.2), ("imagenet", 25.6), ("bert", 110.0), ("yolov3", 61.9)])
def test_profiles_have_the_published_parameter_counts(application, published_m):
    params_m = sum(g.params for g in layer_profile(application)) / 1e6
    assert params_m == pytest.approx(published_m, rel=0.02)


def test_resnet50_forward_cost_is_the_published_4_gflops():
    macs = sum(g.forward for g in layer_profile("imagenet"))
    assert 3.8e9 < macs < 4.2e9  # He et al.: 3.8 x 10^9 multiply-adds


def test_default_penalty_reproduces_freezeout():
    """~10 % speedup is (nearly) free, ~20 % costs ~3 %, on a compute-bound ResNet-50."""
    groups, model = layer_profile("imagenet"), FreezePenalty()
    speedup_10, cost_10 = linear_schedule_speedup_and_penalty(groups, 0.27, model)
    speedup_20, cost_20 = linear_schedule_speedup_and_penalty(groups, 0.5, model)
    assert speedup_10 == pytest.approx(0.10, abs=0.01) and cost_10 < 0.006
    assert speedup_20 == pytest.approx(0.20, abs=0.01) and cost_20 == pytest.approx(0.03, abs=0.003)


@given(st.floats(0, 1), st.floats(0, 1), st.floats(0, 1), st.floats(0, 1))
def test_penalty_rises_with_freezing_and_falls_with_progress(phi_a, phi_b, q_a, q_b):
    model = FreezePenalty()
    lo_phi, hi_phi = sorted((phi_a, phi_b))
    lo_q, hi_q = sorted((q_a, q_b))
    assert penalty(model, lo_phi, lo_q) <= penalty(model, hi_phi, lo_q) + 1e-12
    assert penalty(model, hi_phi, hi_q) <= penalty(model, hi_phi, lo_q) + 1e-12
    assert 0.0 <= penalty(model, hi_phi, lo_q) < 1.0


def test_pipetransformer_schedule_is_geometric_and_keeps_one_group_training():
    assert [geometric_frozen_groups(6, t) for t in range(6)] == [0, 2, 4, 5, 5, 5]  # ceil(6 x (1 - (2/3)^T)), at most 5


def _freezing_round(seed: int, gpus: int = 16, jobs: int = 8) -> tuple:
    ri = random_round(np.random.default_rng(seed), gpus, jobs, freeze_fraction=1.0)
    return ri, replace(ri, jobs=tuple(replace(j, freezing=None) for j in ri.jobs))


@pytest.mark.parametrize("seed", range(8))
def test_freezing_never_exceeds_a_budget_nor_loses_objective(seed):
    ri, no_freeze = _freezing_round(seed)
    res, base = solve_round(ri), solve_round(no_freeze)
    budgets = {j.id: j.freezing.budget_left for j in ri.jobs}
    assert all(a.freeze_penalty <= budgets[a.job_id] + 1e-12 for a in res.allocations)
    assert res.objective >= base.objective - 1e-6 * abs(base.objective)
    assert res.status == "optimal" and res.verified


def test_a_job_without_budget_never_freezes_past_free_levels():
    ri, _ = _freezing_round(3)
    broke = replace(ri, jobs=tuple(replace(j, freezing=replace(j.freezing, budget_left=0.0)) for j in ri.jobs))
    assert all(a.freeze_penalty <= 1e-12 for a in solve_round(broke).allocations)


def test_freezing_late_in_training_is_chosen_and_speeds_jobs_up():
    ri, base = _freezing_round(5)
    late = replace(ri, jobs=tuple(replace(j, freezing=replace(j.freezing, progress=0.95, budget_left=0.03))
                                  for j in ri.jobs))
    res = solve_round(late)
    assert any(a.frozen_groups > 0 for a in res.allocations)
    assert res.objective > solve_round(base).objective


@pytest.mark.parametrize("seed", range(3))
def test_folding_levels_into_options_is_exact(seed):
    """The round optimum equals the best over every assignment of one fixed freeze level per job
    (each a restriction of the model; together they cover its feasible set)."""
    rng = np.random.default_rng(100 + seed)
    ri = tiny_round(rng, max_jobs=3, max_nodes=2)
    jobs = tuple(replace(j, freezing=FreezeSpec(layer_profile(j.application), progress=float(rng.uniform(0.3, 1)),
                                                total_steps=3000.0, budget_left=float(rng.uniform(0, 0.03))))
                 for j in ri.jobs)
    ri = replace(ri, jobs=jobs)
    best = -np.inf
    for levels in itertools.product(*(range(len(j.freezing.groups) - 1 + 1) for j in jobs)):
        fixed = tuple(replace(j, freezing=replace(j.freezing, min_frozen=k, max_frozen=k)) for j, k in zip(jobs, levels))
        best = max(best, solve_round(replace(ri, jobs=fixed)).objective)
    assert solve_round(ri).objective == pytest.approx(best, rel=1e-6, abs=1e-6)


def test_freezing_round_trips_through_json_and_bad_fields_are_named():
    ri, _ = _freezing_round(1, jobs=3)
    assert parse_round_input(round_input_to_dict(ri)) == ri
    raw = round_input_to_dict(ri)
    raw["jobs"][0]["freezing"] = {"profile": "vgg", "progress": 1.5, "total_steps": 0, "budget_left": 0.01,
                                  "max_frozen": 9}
    with pytest.raises(InputError) as err:
        parse_round_input(raw)
    text = str(err.value)
    for field in ("jobs[0].freezing.profile", "jobs[0].freezing.progress", "jobs[0].freezing.total_steps"):
        assert field in text
    raw["jobs"][0]["freezing"] = {"progress": 0.5, "total_steps": 10, "budget_left": 0.01, "max_frozen": 9}
    with pytest.raises(InputError, match=r"jobs\[0\]\.freezing\.max_frozen"):
        parse_round_input(raw)


def test_application_profiles_cover_the_pollux_workloads():
    from schedlab.models.profiles import APPLICATIONS
    assert set(APPLICATIONS) == set(PROFILES)
    for app in APPLICATIONS:
        groups = layer_profile(app)
        assert [frozen_fraction(groups, k) for k in range(len(groups))] == sorted(
            frozen_fraction(groups, k) for k in range(len(groups)))


@pytest.fixture(scope="module")
def freeze_replays():
    jobs = trace_jobs(synthetic_workload(12, 40.0, np.random.default_rng(3), mix={"cifar10": 1, "ncf": 1}))
    config = ReplayConfig().with_options(num_nodes=4, gpus_per_node=4, freeze_opt_in=1.0, horizon_s=3 * 3600.0)
    return {name: replay(jobs, make_policy(name), config) for name in ("pollux", "icefrog", "static_freeze")}


def test_icefrog_replay_freezes_within_budgets(freeze_replays):
    ice = freeze_replays["icefrog"].summary
    assert ice["jobs_completed"] == 12 and ice["freeze_jobs"] == 12
    assert ice["penalty_mean"] > 0 and ice["budget_violations"] == 0
    assert freeze_replays["pollux"].summary["penalty_max"] == 0.0


def test_static_schedule_ignores_budgets(freeze_replays):
    assert freeze_replays["static_freeze"].summary["budget_violations"] > 0


def test_opt_in_fraction_is_seeded():
    jobs = trace_jobs(synthetic_workload(10, 40.0, np.random.default_rng(1), mix={"cifar10": 1}))
    config = ReplayConfig().with_options(num_nodes=2, gpus_per_node=4, freeze_opt_in=0.5, horizon_s=600.0)
    a = replay(jobs, make_policy("icefrog"), config).jobs
    b = replay(jobs, make_policy("icefrog"), config).jobs
    assert a.freeze_budget.notna().sum() == 5
    assert a.freeze_budget.notna().tolist() == b.freeze_budget.notna().tolist()
