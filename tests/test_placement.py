"""PAL placement: the exact model's linearization, its bound over the greedy, feasibility of all;
the round formulation built on it, its Pyomo twin, and brute force over every assignment."""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedlab.api import solve_round
from schedlab.bench import random_round
from schedlab.errors import InputError
from schedlab.formulations.placement import build, build_pyomo, model_sets, point
from schedlab.formulations.placement_greedy import pal_greedy
from schedlab.formulations.placement_problem import (
    PlacementGpu,
    PlacementInput,
    PlacementJob,
    job_speed,
    placement_objective,
)
from schedlab.formulations.placement_round import placement_model, placement_view, solve_placement
from schedlab.policies import PLACERS
from schedlab.policies.placement import GreedyPlacementPolicy
from schedlab.solvers.highs_direct import solve_highs
from schedlab.solvers.pyomo_backend import solve_appsi_highs
from schedlab.solvers.registry import solver
from schedlab.state import Cluster, GpuRef, Node, RoundInput, Settings, Topology

CLASSES = ("classA", "classB")
HIGHS, CPSAT = solver("highs"), solver("cpsat")


def tiny(seed: int, nodes: int = 2, per_node: int = 2, restart_penalty: float = 0.0) -> PlacementInput:
    rng = np.random.default_rng(seed)
    gpus = tuple(PlacementGpu(f"g{n}{k}", f"n{n}", {c: float(rng.choice([1.0, 1.1, 1.3])) for c in CLASSES})
                 for n in range(nodes) for k in range(per_node))
    total, jobs, idle = len(gpus), [], [g.id for g in gpus]
    while True:
        size = int(rng.integers(1, 4))
        if sum(j.num_gpus for j in jobs) + size > total:
            break
        current = ()
        if rng.random() < 0.5 and len(idle) >= size:  # some jobs run on a random slice of the GPUs
            current = tuple(str(g) for g in rng.choice(idle, size, replace=False))
            idle = [g for g in idle if g not in current]
        jobs.append(PlacementJob(f"j{len(jobs)}", size, CLASSES[rng.integers(2)], current, float(rng.uniform(0.5, 2))))
    return PlacementInput(gpus, tuple(jobs), across_node=1.7, restart_penalty=restart_penalty)


def brute_force(pi: PlacementInput) -> float:
    """Best objective over every assignment of GPUs to jobs (direct max, no linearization)."""
    ids = [g.id for g in pi.gpus]
    best = -np.inf
    for perm in itertools.permutations(ids):
        placement, start = {}, 0
        for job in pi.jobs:
            placement[job.id] = tuple(sorted(perm[start:start + job.num_gpus]))
            start += job.num_gpus
        best = max(best, placement_objective(pi, placement))
    return best


@pytest.mark.parametrize("seed", range(12))
def test_worst_slowdown_linearization_equals_a_direct_max(seed):
    pi = tiny(seed, restart_penalty=0.3)
    result = solve_placement(pi, HIGHS)
    assert result.status == "optimal"
    assert result.objective == pytest.approx(brute_force(pi), abs=1e-6)
    assert solve_placement(pi, CPSAT).objective == pytest.approx(result.objective, abs=1e-6)  # the twin


def test_cpsat_keeps_a_spread_job_on_its_fastest_gpus():
    """p = 1/tau_0 exactly (a job spread over nodes, on its fastest tier): 1e6/1.3 rounds up, and
    CP-SAT's scaled model, rounded inward, had no point at all."""
    gpus = tuple(PlacementGpu(f"g{n}{k}", f"n{n}", {"classA": 1.3}) for n in range(2) for k in range(2))
    pi = PlacementInput(gpus, (PlacementJob("j", 4, "classA"),))
    out = solve_placement(pi, CPSAT)
    assert out.status == "optimal"
    assert out.objective == pytest.approx(1 / (1.3 * 1.7), abs=1e-9)


def twin_rich(seed: int) -> PlacementInput:
    """Waiting jobs of two classes and weight 1 on 2 nodes of 3 GPUs, few of them fast: the model
    has (twins) and (scarce) rows."""
    rng = np.random.default_rng(seed)
    gpus = tuple(PlacementGpu(f"g{n}{k}", f"n{n}", {c: float(rng.choice([1.0, 1.3, 1.3])) for c in CLASSES})
                 for n in range(2) for k in range(3))
    jobs: list[PlacementJob] = []
    while (size := int(rng.integers(1, 3))) + sum(j.num_gpus for j in jobs) <= len(gpus):
        jobs.append(PlacementJob(f"j{len(jobs)}", size, CLASSES[rng.integers(2)]))
    return PlacementInput(gpus, tuple(jobs), across_node=1.7)


@pytest.mark.parametrize("seed", range(10))
def test_the_valid_inequalities_keep_the_optimum(seed):
    pi = twin_rich(seed)
    st = model_sets(pi)
    assert st.twins(pi) or st.scarce_tiers()
    result = solve_placement(pi, HIGHS, mip_gap=0.0)
    assert result.status == "optimal"
    assert result.objective == pytest.approx(brute_force(pi), abs=1e-9)


@pytest.mark.parametrize("seed", range(10))
def test_a_start_placement_is_a_point_of_the_model_whatever_its_twins_order(seed):
    """(twins) orders interchangeable jobs by worst tier; a start placing them otherwise is the
    same placement up to their names, and its point must satisfy every row (HiGHS drops a start
    that breaks one, and a solver out of time then answered below PAL's greedy)."""
    pi = twin_rich(seed)
    model = build(pi)
    greedy = pal_greedy(pi, np.random.default_rng(seed))
    swapped = dict(greedy)  # the twins' GPUs exchanged: the same placement up to their names
    for a, b in model_sets(pi).twins(pi):
        swapped[pi.jobs[a].id], swapped[pi.jobs[b].id] = swapped[pi.jobs[b].id], swapped[pi.jobs[a].id]
    for start in (greedy, swapped):
        v = point(pi, model, start)
        assert model.arrays.max_violation(v) <= 1e-9
        assert model.arrays.objective(v) == pytest.approx(placement_objective(pi, start), abs=1e-9)


@pytest.mark.parametrize("seed", range(8))
def test_exact_placement_is_never_worse_than_pal_greedy(seed):
    pi = tiny(seed, nodes=4, per_node=4, restart_penalty=0.1)
    exact = solve_placement(pi, HIGHS)
    assert exact.status == "optimal"
    greedy = placement_objective(pi, pal_greedy(pi, np.random.default_rng(seed)))
    assert exact.objective >= greedy - 1e-9


GREEDY = {name: cls.greedy for name, cls in PLACERS.items() if issubclass(cls, GreedyPlacementPolicy)}


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from(sorted(GREEDY)))
def test_every_placement_is_capacity_feasible(seed, policy):
    pi = tiny(seed, nodes=3, per_node=4)
    placement = GREEDY[policy](pi, np.random.default_rng(seed))
    used = [g for gs in placement.values() for g in gs]
    assert len(used) == len(set(used)) and set(used) <= set(pi.gpu_index)
    assert all(len(placement[j.id]) == j.num_gpus for j in pi.jobs)


def test_a_gpu_current_for_two_jobs_is_refused():
    gpus = (PlacementGpu("a", "n0", {"classA": 1.0}), PlacementGpu("b", "n0", {"classA": 1.0}))
    with pytest.raises(InputError, match="GPU a is current for both j and k"):
        PlacementInput(gpus, (PlacementJob("j", 1, "classA", ("a",)), PlacementJob("k", 1, "classA", ("a",))))


def test_speed_is_one_over_worst_slowdown_times_locality():
    gpus = (PlacementGpu("a", "n0", {"classA": 1.0}), PlacementGpu("b", "n0", {"classA": 1.25}),
            PlacementGpu("c", "n1", {"classA": 1.0}))
    pi = PlacementInput(gpus, (PlacementJob("j", 2, "classA"),), across_node=2.0)
    job = pi.jobs[0]
    assert job_speed(pi, job, ("a", "b")) == pytest.approx(0.8)
    assert job_speed(pi, job, ("a", "c")) == pytest.approx(0.5)
    assert solve_placement(pi, HIGHS).placement == {"j": ("a", "b")}  # slow GPU beats spreading at L = 2
    wide = PlacementInput(gpus, pi.jobs, across_node=1.1)
    assert solve_placement(wide, HIGHS).placement == {"j": ("a", "c")}  # and loses at L = 1.1


def test_warm_started_exact_placement_under_a_time_limit_is_never_worse_than_its_start():
    rng = np.random.default_rng(3)
    gpus = tuple(PlacementGpu(f"g{n}/{k}", f"n{n}", {c: float(rng.uniform(0.95, 1.2)) for c in CLASSES})
                 for n in range(16) for k in range(4))
    sizes = [8, 4, 4, 2, 2, 1, 1, 1, 4, 8, 2, 1, 4, 2, 8, 4, 1, 2]
    jobs = tuple(PlacementJob(f"j{i}", s, CLASSES[i % 2]) for i, s in enumerate(sizes))
    pi = PlacementInput(gpus, jobs)
    greedy = pal_greedy(pi, rng)
    result = solve_placement(pi, HIGHS, time_limit_s=0.05, start=greedy)
    assert result.objective >= placement_objective(pi, greedy) - 1e-9


def test_a_solver_out_of_time_before_any_point_answers_with_its_start_flagged():
    # CP-SAT at a 50 ms limit can stop before its first point (PAL's replay met it); the
    # warm start is then the answer, flagged as not proven, never an error.
    rng = np.random.default_rng(3)
    gpus = tuple(PlacementGpu(f"g{n}/{k}", f"n{n}", {c: float(rng.uniform(0.95, 1.2)) for c in CLASSES})
                 for n in range(32) for k in range(4))
    jobs = tuple(PlacementJob(f"j{i}", [1, 2, 4, 8][i % 4], CLASSES[i % 2]) for i in range(30))
    pi = PlacementInput(gpus, jobs)
    greedy = pal_greedy(pi, rng)
    result = solve_placement(pi, CPSAT, time_limit_s=0.001, start=greedy)
    assert result.status == "time_limit"
    # the greedy's GPU sets, interchangeable jobs' exchanged as (twins) orders them
    assert sorted(result.placement.values()) == sorted(tuple(sorted(g)) for g in greedy.values())
    assert result.objective == pytest.approx(placement_objective(pi, greedy), abs=1e-12)
    assert solve_placement(pi, CPSAT, time_limit_s=0.001).placement == result.placement  # PAL's greedy by default


def small_round(seed: int, max_gpus: int = 12, max_jobs: int = 4) -> RoundInput:
    """2-3 nodes of 2-4 GPUs (at most max_gpus), random slowdowns for classes A and B (the ncf
    jobs' class D unlisted: 1), an across-node factor; 2..max_jobs jobs of 1-3 GPUs while they
    fit, about half running on random GPUs (not always as many as they ask for now)."""
    rng = np.random.default_rng(seed)
    num_nodes = int(rng.integers(2, 4))
    per_node = int(rng.integers(2, min(4, max_gpus // num_nodes) + 1))
    factors = lambda: tuple(float(rng.choice([1.0, 1.1, 1.3])) for _ in range(per_node))  # noqa: E731
    nodes = tuple(Node(f"n{n}", per_node, slowdown={c: factors() for c in CLASSES}) for n in range(num_nodes))
    idle = [GpuRef(n.id, k) for n in nodes for k in range(n.gpus)]
    rng.shuffle(idle)
    left, jobs = len(idle), []
    for job in random_round(rng, len(idle), int(rng.integers(2, max_jobs + 1)), per_node, running_fraction=0.0).jobs:
        size = int(rng.integers(1, 4))
        if size > left:
            break
        left -= size
        held = int(rng.integers(1, 4))
        current = ()
        if rng.random() < 0.5 and len(idle) >= held:
            current, idle = tuple(idle[:held]), idle[held:]
        jobs.append(replace(job, requested_gpus=size, requested_bsz=size * job.batch.min_local_bsz,
                            current_gpus=current))
    topology = Topology(across_node_factor=float(rng.choice([1.2, 1.7])))
    return RoundInput(Cluster(nodes, topology), tuple(jobs), Settings(formulation="placement"))


@pytest.mark.parametrize("seed", range(10))
def test_round_formulation_is_the_same_model_in_arrays_and_pyomo(seed):
    ri = small_round(seed)
    arrays, pyomo = solve_round(ri, solver="highs"), solve_round(ri, solver="appsi_highs")
    assert arrays.status == pyomo.status == "optimal"
    assert pyomo.objective == pytest.approx(arrays.objective, abs=1e-6)
    view = placement_view(ri)
    for job, pjob, a in zip(ri.jobs, view.pi.jobs, arrays.allocations):  # each job whole, at its speed
        assert len(a.gpus) == job.requested_gpus and list(a.gpus) == sorted(a.gpus)
        assert a.speedup == pytest.approx(job_speed(view.pi, pjob, tuple(ref.key for ref in a.gpus)))
        assert a.restarted == (bool(job.current_gpus) and set(a.gpus) != set(job.current_gpus))


@pytest.mark.parametrize("seed", range(8))
def test_pyomo_twin_has_the_arrays_points_and_objective(seed):
    # Each form's optimum is feasible in the other and worth the same there: one model, with
    # weights and a restart penalty too.
    pi = tiny(seed, nodes=3, per_node=2, restart_penalty=0.3)
    model = build(pi)
    pm = build_pyomo(pi)
    assert len(pm.columns) == model.arrays.num_cols and pm.nconstraints() == model.arrays.num_rows
    by_arrays = solve_highs(model.arrays, 30.0, 0.0)
    by_pyomo = solve_appsi_highs(pm, 30.0, 0.0)
    assert by_pyomo.objective == pytest.approx(by_arrays.objective, abs=1e-6)
    assert model.arrays.max_violation(by_pyomo.values) <= 1e-6
    assert model.arrays.objective(by_pyomo.values) == pytest.approx(by_pyomo.objective, abs=1e-6)


@pytest.mark.parametrize("pi", [tiny(seed, nodes=3, per_node=2, restart_penalty=0.3) for seed in range(4)]
                         + [twin_rich(seed) for seed in range(4)])
def test_arrays_and_pyomo_have_the_same_rows_of_each_tag(pi):
    import pyomo.environ as pyo

    rows = Counter(key[0] for key in build(pi).row_keys)
    assert {"stay", "twins", "scarce"} & set(rows)
    assert rows == {c.local_name: len(c) for c in build_pyomo(pi).component_objects(pyo.Constraint) if len(c)}


@pytest.mark.parametrize("seed", range(10))
def test_round_formulation_equals_brute_force_over_every_assignment(seed):
    ri = small_round(seed, max_gpus=6, max_jobs=3)
    result = solve_round(ri, solver="highs")
    assert result.status == "optimal"
    assert result.objective == pytest.approx(brute_force(placement_view(ri).pi), abs=1e-6)


def test_round_formulation_starts_from_pal_greedy_and_falls_back_to_it():
    ri = small_round(4)
    model = placement_model(ri)
    pi = placement_view(ri).pi
    arrays = model.arrays()
    assert arrays.max_violation(arrays.start) <= 1e-9
    greedy = pal_greedy(pi, np.random.default_rng(0))
    assert model.objective(model.fallback()) == pytest.approx(placement_objective(pi, greedy))
    assert model.arrays().objective(model.start()) == pytest.approx(placement_objective(pi, greedy))


def _one_job_round(node_ids: tuple[str, ...], gpus_per_node: int, requested: int, **job_fields) -> RoundInput:
    base = random_round(np.random.default_rng(0), gpus_per_node, 1, gpus_per_node, running_fraction=0.0).jobs[0]
    job = replace(base, requested_gpus=requested, requested_bsz=requested * base.batch.min_local_bsz,
                  **{"max_gpus": len(node_ids) * gpus_per_node, **job_fields})
    nodes = tuple(Node(n, gpus_per_node) for n in node_ids)
    return RoundInput(Cluster(nodes, Topology(across_node_factor=2.0)), (job,), Settings(formulation="placement"))


def test_locality_counts_the_nodes_of_the_gpus():
    # Node ids with "/" in them: the spread is counted over the GPUs' nodes, not parsed GPU ids.
    ri = _one_job_round(("rack/a", "rack/b"), 2, 3)
    (alloc,) = solve_round(ri).allocations
    assert alloc.num_nodes == 2 and alloc.speedup == pytest.approx(0.5)
    (alloc,) = solve_round(replace(ri, jobs=(replace(ri.jobs[0], requested_gpus=2),))).allocations
    assert alloc.num_nodes == 1 and alloc.speedup == pytest.approx(1.0)


def test_a_round_without_jobs_places_nothing():
    ri = replace(small_round(0), jobs=())
    model = placement_model(ri)
    assert model.arrays().num_cols == 0 and model.decode(model.start()) == () and model.objective(model.start()) == 0
    result = solve_round(ri, solver="cpsat")
    assert result.status == "optimal" and result.allocations == ()


@pytest.mark.parametrize("fields, match", [
    ({"max_gpus": 2}, r"jobs\[0\]\.requested_gpus: .* exactly 3 GPUs"),
    ({"min_gpus": 4, "max_gpus": 8}, r"jobs\[0\]\.requested_gpus"),
])
def test_a_job_placed_outside_its_gpu_range_is_refused(fields, match):
    with pytest.raises(InputError, match=match):
        placement_model(_one_job_round(("n0", "n1"), 4, 3, **fields))


def test_more_gpus_than_the_cluster_has_is_refused():
    with pytest.raises(InputError, match="places every job it is given, so give it fewer jobs"):
        placement_model(_one_job_round(("n0",), 2, 3))


def _pal_entry_walk(pi: PlacementInput) -> dict[str, tuple[str, ...]]:
    """PAL's Alg. 1 written as published: walk every (sf, within | across) entry in cost order."""
    sf = lambda job, g: pi.gpu_index[g].slowdown[job.app_class]  # noqa: E731
    sensitivity = {c: max(g.slowdown[c] for g in pi.gpus) - min(g.slowdown[c] for g in pi.gpus)
                   for c in {j.app_class for j in pi.jobs}}
    free, out = [g.id for g in pi.gpus], {}
    for job in sorted(pi.jobs, key=lambda j: -sensitivity[j.app_class]):
        levels = sorted({sf(job, g) for g in free})
        for _, across, level in sorted([(s, False, s) for s in levels] + [(s * pi.across_node, True, s) for s in levels]):
            ok = [g for g in free if sf(job, g) <= level]
            if across and len(ok) >= job.num_gpus:
                out[job.id] = tuple(sorted(ok, key=lambda g: (sf(job, g), pi.node_of(g), g))[: job.num_gpus])
                break
            nodes = [gs for gs in pi.by_node(ok).values() if len(gs) >= job.num_gpus]
            if not across and nodes:  # the tightest node: fewest spare GPUs left behind
                best = min(nodes, key=lambda gs: (len(gs), pi.node_of(gs[0])))
                out[job.id] = tuple(sorted(best, key=lambda g: (sf(job, g), g))[: job.num_gpus])
                break
        free = [g for g in free if g not in out[job.id]]
    return {job.id: out[job.id] for job in pi.jobs}


@pytest.mark.parametrize("seed", range(6))
def test_pal_greedy_takes_the_entries_of_the_published_walk(seed):
    from schedlab.bench import random_placement_round

    for pi in (tiny(seed, nodes=4, per_node=4), random_placement_round(64, seed, np.random.default_rng(seed))):
        assert pal_greedy(pi, np.random.default_rng(seed)) == _pal_entry_walk(pi)


def large_round(seed: int, varied: bool, nodes: int = 64, per_node: int = 4) -> RoundInput:
    """nodes x per_node GPUs (above the exact model's 128), slowdowns 1-1.5 per GPU if varied,
    jobs of 1-8 GPUs filling ~90 % of them, a third running where they fit."""
    rng = np.random.default_rng(seed)
    factors = lambda: tuple(float(rng.uniform(1.0, 1.5)) if varied else 1.0 for _ in range(per_node))  # noqa: E731
    cluster = Cluster(tuple(Node(f"n{n:03d}", per_node, slowdown={c: factors() for c in CLASSES})
                            for n in range(nodes)), Topology(across_node_factor=1.7))
    base = random_round(rng, nodes * per_node, nodes * per_node, per_node, running_fraction=0.0).jobs
    jobs, left = [], int(0.9 * nodes * per_node)
    for job in base:
        size = int(rng.choice([1, 2, 4, 8]))
        if size > left:
            break
        left -= size
        jobs.append(replace(job, requested_gpus=size, requested_bsz=size * job.batch.min_local_bsz,
                            max_gpus=max(job.max_gpus, size)))
    return RoundInput(cluster, tuple(jobs), Settings(formulation="placement", time_limit_s=1.0))


def test_a_large_placement_round_is_solved_in_windows_within_its_limit():
    ri = large_round(0, varied=True)
    view = placement_view(ri)
    result = solve_round(ri)
    greedy = placement_objective(view.pi, pal_greedy(view.pi, np.random.default_rng(0)))
    assert result.status == "time_limit" and "windows solved" in result.message
    assert result.objective > greedy + 1e-6  # the windows improved on PAL's greedy
    assert result.build_s + result.solve_s <= 1.5


def test_a_large_placement_on_uniform_gpus_is_proven_by_its_bound():
    result = solve_round(large_round(1, varied=False))
    assert result.status == "optimal" and result.gap <= 1e-9
    assert all(a.num_nodes == 1 for a in result.allocations if len(a.gpus) <= 4)  # PAL's greedy packs them
