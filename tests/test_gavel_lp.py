"""Gavel's LPs (formulations.gavel): closed-form optima, the Pyomo twin, and what each policy reads of a round."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from schedlab.bench import random_round
from schedlab.formulations.gavel import (
    GavelInput,
    MaxMinLP,
    equal_share_throughput,
    finish_time_fairness,
    ftf_lp,
    gang_steps_per_s,
    gavel_input,
    isolated_throughput,
    las_agnostic_lp,
    las_lp,
    makespan_lp,
)
from schedlab.milp import OPTIMAL
from schedlab.models.efficiency import submitted_split
from schedlab.models.throughput import step_time_s
from schedlab.solvers.highs_direct import solve_highs
from schedlab.solvers.pyomo_backend import solve_appsi_highs
from schedlab.state import Cluster, Node, RoundInput


def _input(T, capacity, scale=None, weight=None, remaining=None) -> GavelInput:
    T = np.array(T, dtype=float)
    J, K = T.shape
    return GavelInput(T, np.ones(J) if scale is None else np.array(scale, dtype=float),
                      np.ones(J) if weight is None else np.array(weight, dtype=float),
                      np.array(capacity, dtype=float), tuple(f"j{j}" for j in range(J)), tuple(f"t{t}" for t in range(K)),
                      None if remaining is None else np.array(remaining, dtype=float))


def _solve(lp: MaxMinLP) -> tuple[float, np.ndarray]:
    """Stage 1's z and stage 2's X."""
    first = solve_highs(lp.arrays(), 30.0, 0.0)
    assert first.status == OPTIMAL
    stage2 = lp.second_stage(first.objective)
    second = solve_highs(stage2.arrays(), 30.0, 0.0)
    assert second.status == OPTIMAL
    return first.objective, stage2.time_fractions(second.values)


def test_each_job_on_the_type_it_is_fast_on_beats_its_equal_share():
    # A runs 4x faster on t0, B 2x faster on t1, one GPU of each: E_A = 2.5, E_B = 1.5 steps/s.
    # A alone on t0 runs at 4 / 2.5 = 1.6 equal shares, B alone on t1 at 2 / 1.5 = 4/3: the
    # max-min is 4/3, where a type-blind split gets every job exactly its GPU-time share, 1.
    inp = _input([[4, 1], [1, 2]], [1, 1])
    z, x = _solve(las_lp(inp))
    assert z == pytest.approx(4 / 3)
    assert x == pytest.approx(np.eye(2), abs=1e-6)
    z_blind, _ = _solve(las_agnostic_lp(inp))
    assert z_blind == pytest.approx(1.0)


def test_a_trade_off_between_two_jobs_has_its_closed_form():
    # Both are faster on t0 (4x and 2x): with A on t0 for p of the time and B for 1 - p, A's rate
    # is 0.4 + 1.2 p and B's 4/3 - 2/3 p equal shares; they meet at p = 1/2, z = 1.
    z, x = _solve(las_lp(_input([[4, 1], [2, 1]], [1, 1])))
    assert z == pytest.approx(1.0)
    assert x == pytest.approx(np.full((2, 2), 0.5), abs=1e-5)


def test_a_gang_owes_the_cluster_its_gpu_time():
    # On 2 GPUs of one type a 2-GPU job and a 1-GPU job share GPU-time: the gang runs half the
    # time, the single job all of it (2 x 1/2 = 1 x 1 GPU-rounds each).
    z, x = _solve(las_lp(_input([[3], [1]], [2], scale=[2, 1])))
    assert z == pytest.approx(1.0)
    assert x[:, 0] == pytest.approx([0.5, 1.0], abs=1e-6)


def test_a_priority_weight_owes_a_job_that_many_shares():
    # Two alike jobs on one GPU, weights 3 and 1: max-min of X_j / w_j gives 3/4 and 1/4.
    z, x = _solve(las_lp(_input([[1], [1]], [1], weight=[3, 1])))
    assert x[:, 0] == pytest.approx([0.75, 0.25], abs=1e-6)


def test_makespan_is_one_over_z():
    # One GPU, 3 and 1 steps left at 1 step/s: the last job finishes after 4 s whatever the split.
    z, x = _solve(makespan_lp(_input([[1], [1]], [1], remaining=[3, 1])))
    assert 1 / z == pytest.approx(4.0)
    # A on t0 at 4 steps/s (8 left), B on t1 at 2 steps/s (4 left): both done after 2 s.
    z, x = _solve(makespan_lp(_input([[4, 1], [1, 2]], [1, 1], remaining=[8, 4])))
    assert 1 / z == pytest.approx(2.0)
    assert x == pytest.approx(np.eye(2), abs=1e-6)


def test_a_job_without_remaining_steps_does_not_count_for_the_makespan():
    z, _ = _solve(makespan_lp(_input([[1], [1]], [1], remaining=[2, math.nan])))
    assert 1 / z == pytest.approx(2.0)


def test_a_job_that_runs_nowhere_does_not_pin_the_minimum_and_nothing_runs_where_it_cannot():
    # Job 2 has no throughput on any type; job 1 none on t1.
    inp = _input([[2, 1], [3, 0], [0, 0]], [1, 1])
    z, x = _solve(las_lp(inp))
    assert z > 0.5
    assert x[1, 1] == 0 and (x[2] == 0).all()


def test_the_agnostic_model_is_blind_to_throughputs():
    rng = np.random.default_rng(0)
    T = rng.uniform(0.5, 4.0, (5, 3)) * (rng.random((5, 3)) > 0.2)
    inp, scaled = _input(T, [4, 8, 2], scale=[1, 2, 1, 4, 2]), _input(T * rng.uniform(1, 9, T.shape), [4, 8, 2],
                                                                      scale=[1, 2, 1, 4, 2])
    a, b = las_agnostic_lp(inp).arrays(), las_agnostic_lp(scaled).arrays()
    assert (a.A != b.A).nnz == 0 and np.array_equal(a.c, b.c) and np.array_equal(a.col_hi, b.col_hi)
    assert (las_lp(inp).arrays().A != las_lp(scaled).arrays().A).nnz > 0


def _max_z(lp: MaxMinLP) -> float:
    return solve_highs(lp.arrays(), 30.0, 0.0).objective


def _ratios(inp: GavelInput, x: np.ndarray, elapsed_s: np.ndarray, isolated_s: np.ndarray) -> np.ndarray:
    """rho_j at time fractions x: (e_j + R_j / y_j) / (c_j + R_j / I_j)."""
    y = (inp.throughput * x).sum(axis=1)
    R = inp.remaining_steps
    return (elapsed_s + R / y) / (isolated_s + R / isolated_throughput(inp))


def test_finish_time_fairness_has_its_closed_form():
    # Two alike jobs on one GPU, one step left each; A has waited 4 s. Alone each would get half
    # the GPU (D = 2 s). rho_A = (4 + 1/y_A) / 2 = rho_B = (1/y_B) / 2 with y_A + y_B = 1 gives
    # 4 y_A^2 - 2 y_A - 1 = 0: y_A = (1 + sqrt 5) / 4 and rho = the golden ratio squared.
    inp = _input([[1], [1]], [1], remaining=[1, 1])
    rho, lp = finish_time_fairness(inp, np.array([4.0, 0.0]), np.zeros(2), _max_z)
    assert rho == pytest.approx((1 + math.sqrt(5)) / 2 + 1, rel=2e-4)
    _, x = _solve_second(lp)
    assert x[:, 0] == pytest.approx([(1 + math.sqrt(5)) / 4, 1 - (1 + math.sqrt(5)) / 4], abs=1e-3)


def _solve_second(lp: MaxMinLP) -> tuple[float, np.ndarray]:
    stage2 = lp.second_stage(1.0)
    out = solve_highs(stage2.arrays(), 30.0, 0.0)
    assert out.status == OPTIMAL
    return out.objective, stage2.time_fractions(out.values)


@pytest.mark.parametrize("seed", range(8))
def test_no_allocation_has_a_smaller_largest_finish_time_ratio(seed):
    # The LAS optimum and the isolated split are allocations too: their largest rho is no smaller.
    rng = np.random.default_rng(seed)
    inp = _random_input(rng)
    inp = replace(inp, remaining_steps=rng.uniform(100, 1000, inp.num_jobs),
                  throughput=np.maximum(inp.throughput, 0.05 * (np.arange(inp.num_types) == 0)))
    elapsed, alone = rng.uniform(0, 500, inp.num_jobs), rng.uniform(0, 300, inp.num_jobs)
    rho, lp = finish_time_fairness(inp, elapsed, alone, _max_z)
    _, x = _solve_second(lp)
    assert _ratios(inp, x, elapsed, alone).max() == pytest.approx(rho, rel=1e-3)
    _, las_x = _solve(las_lp(inp))
    assert _ratios(inp, las_x, elapsed, alone).max() >= rho * (1 - 1e-3)


def test_the_isolated_throughput_is_an_equal_split_of_each_type_scaled_to_one_job():
    # 3 jobs on 6 + 3 GPUs: a 1-GPU job gets 2 + 1 GPUs, more time than it has (sum 3 > 1),
    # scaled to 2/3 + 1/3; a 3-GPU job gets 2/3 + 1/3 too; a job that cannot run on t1 takes
    # its 2 GPUs of t0, all of its time there.
    inp = _input([[3, 6], [3, 6], [3, 0]], [6, 3], scale=[1, 3, 1])
    assert isolated_throughput(inp).tolist() == pytest.approx([4.0, 4.0, 3.0])


def _random_input(rng: np.random.Generator) -> GavelInput:
    J, K = int(rng.integers(1, 8)), int(rng.integers(1, 4))
    T = rng.uniform(0.1, 5.0, (J, K)) * (rng.random((J, K)) > 0.25)
    remaining = rng.uniform(0, 1000, J) * (rng.random(J) > 0.1)
    return _input(T, rng.integers(1, 9, K), scale=rng.choice([1, 2, 4], J), weight=rng.choice([1.0, 2.0], J),
                  remaining=remaining)


def _ftf_at_double_rho(inp: GavelInput) -> MaxMinLP:
    zeros = np.zeros(inp.num_jobs)
    rho, _ = finish_time_fairness(inp, zeros, zeros, _max_z, rel_tol=1e-2)
    return ftf_lp(inp, 2 * rho, zeros, zeros)


@pytest.mark.parametrize("build", [las_lp, las_agnostic_lp, makespan_lp, _ftf_at_double_rho])
@pytest.mark.parametrize("seed", range(6))
def test_the_pyomo_twin_reaches_the_same_optimum_in_both_stages(build, seed):
    lp = build(_random_input(np.random.default_rng(seed)))
    for stage in (1, 2):
        by_arrays = solve_highs(lp.arrays(), 30.0, 0.0)
        by_twin = solve_appsi_highs(lp.pyomo(), 30.0, 0.0)
        assert by_arrays.status == by_twin.status == OPTIMAL
        assert by_twin.objective == pytest.approx(by_arrays.objective, rel=1e-7, abs=1e-9)
        assert lp.arrays().max_violation(by_twin.values) < 1e-6  # HiGHS's feasibility tolerance
        if stage == 1:
            lp = lp.second_stage(by_arrays.objective)


def test_equal_share_throughput_weighs_types_by_their_gpus():
    assert equal_share_throughput(_input([[4, 1]], [1, 3])).tolist() == [pytest.approx(1.75)]


def test_a_rounds_jobs_are_valued_at_their_gang_and_submitted_batch_on_each_type():
    base = random_round(np.random.default_rng(3), 8, 1, 4, running_fraction=0.0).jobs[0]
    params = next(iter(base.throughput.values()))
    jobs = (replace(base, throughput={"v100": params}, requested_gpus=4),
            replace(base, id="other", throughput={"v100": params, "k80": params}, requested_gpus=1))
    nodes = (Node("a0", 4, "v100"), Node("a1", 4, "v100"), Node("b0", 2, "k80"))
    inp = gavel_input(RoundInput(Cluster(nodes), jobs))
    assert inp.gpu_types == ("k80", "v100") and inp.capacity_gpus.tolist() == [2, 8]
    micro, accum = submitted_split(jobs[0], 4)
    # the 4-GPU gang consolidated on one v100 node; no model on k80
    assert inp.throughput[0].tolist() == [0.0, pytest.approx(1 / float(step_time_s(params, 1, 4, micro, accum)))]
    assert inp.throughput[1, 0] == inp.throughput[1, 1] > 0
    assert gang_steps_per_s(replace(jobs[1], requested_gpus=4), "k80", 2, 2) == 0.0  # the gang exceeds the type
    assert inp.scale.tolist() == [4, 1]
