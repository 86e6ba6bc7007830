"""Clusters of several GPU types: goodput, joint and placement reach the brute force's optimum
(tests/brute_force.py, which enforces one type per job, and only types a job has parameters
for) on small rounds of two and three types; the Pyomo twins give the same optimum; and the
brute force itself tells the types apart."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest
from brute_force import best_objective, feasible_choices, joint_best, placement_best

from schedlab.api import solve_round
from schedlab.bench import random_round
from schedlab.errors import InputError
from schedlab.formulations.options import enumerate_options
from schedlab.formulations.placement import build, build_pyomo
from schedlab.formulations.placement_greedy import pal_greedy
from schedlab.formulations.placement_problem import (
    PlacementGpu,
    PlacementInput,
    PlacementJob,
    placement_objective,
    type_plan,
)
from schedlab.formulations.placement_round import placement_model, placement_view, solve_placement
from schedlab.models.efficiency import goodput
from schedlab.solvers.registry import solver
from schedlab.state import Cluster, GpuRef, Node, Rack, RoundInput, Settings, ThroughputParams, Topology

TYPES = ("a100", "t4", "v100")
SLOWER = {"a100": 1.0, "t4": 3.0, "v100": 1.7}  # compute time per type, times the profile's
CLASSES = ("classA", "classB")


def _on_type(params: ThroughputParams, gpu_type: str, rng: np.random.Generator) -> ThroughputParams:
    """The profile's parameters made slower on a type (its compute, and the network a little)."""
    f = SLOWER[gpu_type] * float(rng.uniform(0.8, 1.25))
    return replace(params, alpha_c=params.alpha_c * f, beta_c=params.beta_c * f, alpha_n=params.alpha_n * (1 + f) / 2)


def mixed_round(seed: int, num_types: int, p: float = -1.0, max_jobs: int = 4, gpus_per_node: int | None = None,
                variability: bool = False) -> RoundInput:
    """2-3 nodes of 2 or 4 GPUs, of `num_types` types (each present); 2..max_jobs jobs, each with
    parameters for a random non-empty set of the types (slower on some), about half running on
    GPUs of one node of a type they have parameters for."""
    rng = np.random.default_rng(seed)
    gpn = gpus_per_node or int(rng.choice([2, 4]))
    num_nodes = max(num_types, int(rng.integers(2, 4)))
    types = list(TYPES[:num_types]) + [str(t) for t in rng.choice(TYPES[:num_types], num_nodes - num_types)]
    factors = lambda: tuple(float(rng.choice([1.0, 1.0, 1.3])) for _ in range(gpn))  # noqa: E731
    nodes = tuple(Node(f"n{k}", gpn, t, {c: factors() for c in CLASSES} if variability else {})
                  for k, t in enumerate(types))
    base = random_round(rng, num_nodes * gpn, int(rng.integers(2, max_jobs + 1)), gpn, running_fraction=0.0,
                        settings=Settings(p=p))
    free = {n.id: list(range(gpn)) for n in nodes}
    jobs = []
    for job in base.jobs:
        params = job.throughput[base.cluster.nodes[0].gpu_type]
        mine = [t for t in TYPES[:num_types] if rng.random() < 0.7] or [str(rng.choice(TYPES[:num_types]))]
        current: tuple[GpuRef, ...] = ()
        node = nodes[int(rng.integers(num_nodes))]
        if rng.random() < 0.5 and free[node.id]:
            count = int(rng.integers(1, len(free[node.id]) + 1))
            current = tuple(GpuRef(node.id, i) for i in free[node.id][:count])
            del free[node.id][:count]
            mine = sorted({*mine, node.gpu_type})
        jobs.append(replace(job, throughput={t: _on_type(params, t, rng) for t in mine}, current_gpus=current,
                            app_class=str(rng.choice(CLASSES)), age_s=float(rng.uniform(0, 3600))))
    topology = Topology(tuple(Rack(f"r{k}", (n.id,), uplink_gbps=25.0) for k, n in enumerate(nodes)),
                        across_node_factor=1.3)
    return RoundInput(Cluster(nodes, topology), tuple(jobs), Settings(p=p))


def _one_type_each(ri: RoundInput, allocations) -> None:
    """Every job's GPUs are of one type it has parameters for."""
    type_of = {n.id: n.gpu_type for n in ri.cluster.nodes}
    jobs = {j.id: j for j in ri.jobs}
    for a in allocations:
        kinds = {type_of[g.node] for g in a.gpus}
        assert len(kinds) <= 1 and kinds <= jobs[a.job_id].throughput.keys(), (a.job_id, kinds)


def _goodput_on_its_type(ri: RoundInput, allocations) -> None:
    """Each allocated job's goodput is its own model's on the type of its GPUs (models.efficiency.goodput):
    the brute force takes the options' values, so this checks the values' types."""
    type_of = {n.id: n.gpu_type for n in ri.cluster.nodes}
    jobs = {j.id: j for j in ri.jobs}
    for a in allocations:
        if a.gpus:
            job = jobs[a.job_id]
            expected = goodput(job.throughput[type_of[a.gpus[0].node]], job.grad_stats, job.batch.init_bsz, a.num_nodes,
                               a.num_gpus, a.local_bsz, a.accum_steps)
            assert a.goodput == pytest.approx(float(expected), rel=1e-9), a.job_id


def _goodput_best(ri: RoundInput) -> float:
    return best_objective(enumerate_options(ri, prune=False),
                          feasible_choices(enumerate_options(replace(ri, settings=Settings(p=1.0)), prune=False)))


CASES = [(seed, num_types, p) for num_types in (2, 3) for p in (1.0, -1.0, -math.inf) for seed in range(5)]


@pytest.mark.parametrize("seed, num_types, p", CASES)
def test_goodput_reaches_the_brute_force_optimum_on_several_types(seed, num_types, p):
    ri = mixed_round(seed, num_types, p)
    result = solve_round(replace(ri, settings=replace(ri.settings, mip_gap=0.0)))
    assert result.status == "optimal", result.message  # a fallback where an optimum was expected fails
    expected = _goodput_best(ri)
    assert result.objective == pytest.approx(expected, abs=1e-6 * max(1.0, abs(expected)))
    _one_type_each(ri, result.allocations)
    _goodput_on_its_type(ri, result.allocations)


@pytest.mark.parametrize("seed, num_types, p", CASES)
def test_joint_reaches_the_brute_force_optimum_on_several_types(seed, num_types, p):
    ri = mixed_round(seed, num_types, p, max_jobs=3, gpus_per_node=2, variability=True)
    result = solve_round(replace(ri, settings=replace(ri.settings, formulation="joint", mip_gap=0.0)))
    assert result.status == "optimal", result.message
    expected = joint_best(ri)
    assert result.objective == pytest.approx(expected, abs=1e-6 * max(1.0, abs(expected)))
    _one_type_each(ri, result.allocations)


@pytest.mark.parametrize("formulation", ["goodput", "joint"])
@pytest.mark.parametrize("seed, num_types", [(0, 2), (1, 3), (2, 3)])
def test_the_pyomo_twin_gives_the_same_optimum_on_several_types(formulation, seed, num_types):
    ri = mixed_round(seed, num_types, -1.0, max_jobs=4, variability=formulation == "joint")
    ri = replace(ri, settings=replace(ri.settings, formulation=formulation, mip_gap=0.0))
    arrays, pyomo = solve_round(ri, solver="highs"), solve_round(ri, solver="appsi_highs")
    assert arrays.status == pyomo.status == "optimal"
    assert pyomo.objective == pytest.approx(arrays.objective, abs=1e-6 * max(1.0, abs(arrays.objective)))


def _placement_round(seed: int, num_types: int) -> RoundInput:
    """A mixed round of at most 8 GPUs as the placement formulation takes it: 1-3 GPUs per job
    (1-2 on three types), the jobs kept while they fit on their types together."""
    ri = mixed_round(seed, num_types, max_jobs=3, gpus_per_node=2 if num_types == 3 else int(seed % 2) * 2 + 2,
                     variability=True)
    rng = np.random.default_rng(seed)
    left = {t: sum(n.gpus for n in ri.cluster.nodes if n.gpu_type == t) for t in ri.cluster.gpu_types}
    jobs = []
    for job in ri.jobs:
        size = int(rng.integers(1, 4 if num_types == 2 else 3))
        room = [t for t in sorted(job.throughput) if left.get(t, 0) >= size]
        if not room:
            continue
        left[room[0]] -= size
        jobs.append(replace(job, requested_gpus=size, requested_bsz=size * job.batch.min_local_bsz,
                            max_gpus=max(job.max_gpus, size)))
    assert jobs, "a placement round without jobs tests nothing"
    return replace(ri, jobs=tuple(jobs), settings=Settings(formulation="placement", mip_gap=0.0))


@pytest.mark.parametrize("seed, num_types", [(seed, n) for n in (2, 3) for seed in range(8)])
def test_placement_reaches_the_brute_force_optimum_on_several_types(seed, num_types):
    ri = _placement_round(seed, num_types)
    result = solve_round(ri, solver="highs")
    assert result.status == "optimal", result.message
    expected, _ = placement_best(placement_view(ri).pi)
    assert result.objective == pytest.approx(expected, abs=1e-6)
    _one_type_each(ri, result.allocations)


@pytest.mark.parametrize("seed, num_types", [(3, 2), (7, 2), (0, 3), (6, 3)])
def test_placement_arrays_pyomo_and_cpsat_are_one_model_on_several_types(seed, num_types):
    import pyomo.environ as pyo

    ri = _placement_round(seed, num_types)
    pi = placement_view(ri).pi
    rows = Counter(key[0] for key in build(pi).row_keys)
    assert {"typed", "onetype"} <= set(rows)
    assert rows == {c.local_name: len(c) for c in build_pyomo(pi).component_objects(pyo.Constraint) if len(c)}
    arrays, pyomo, cpsat = (solve_round(ri, solver=name) for name in ("highs", "appsi_highs", "cpsat"))
    assert arrays.status == pyomo.status == cpsat.status == "optimal"
    assert pyomo.objective == pytest.approx(arrays.objective, abs=1e-6)
    assert cpsat.objective == pytest.approx(arrays.objective, abs=1e-6)  # from the same arrays


def _two_types(job_gpus: int = 2) -> RoundInput:
    """One node of 2 fast GPUs, one of 2 slow; one job of `job_gpus` GPUs with parameters for both,
    three times slower in compute on t4; one job of 1 GPU with parameters for t4 only."""
    base = random_round(np.random.default_rng(0), 4, 2, 2, running_fraction=0.0)
    params = base.jobs[0].throughput["default"]
    slow = replace(params, alpha_c=3 * params.alpha_c, beta_c=3 * params.beta_c)
    jobs = (replace(base.jobs[0], throughput={"a100": params, "t4": slow}, max_gpus=2, requested_gpus=job_gpus,
                    requested_bsz=job_gpus * base.jobs[0].batch.min_local_bsz),
            replace(base.jobs[1], throughput={"t4": base.jobs[1].throughput["default"]}, max_gpus=1, requested_gpus=1,
                    requested_bsz=base.jobs[1].batch.min_local_bsz))
    return RoundInput(Cluster((Node("n0", 2, "t4"), Node("n1", 2, "a100"))), jobs, Settings(p=1.0))


@pytest.mark.parametrize("formulation", ["goodput", "joint", "placement"])
def test_the_brute_force_tells_the_types_apart(formulation):
    """On _two_types the best answer puts the first job on the fast type: the brute force's value
    falls when that type is taken from the job (so a model that confused the types would fail
    the tests above), and every formulation puts it there; the t4-only job stays on t4."""
    ri = replace(_two_types(), settings=Settings(p=1.0, formulation=formulation, mip_gap=0.0))
    only_slow = replace(ri, jobs=(replace(ri.jobs[0], throughput={"t4": ri.jobs[0].throughput["t4"]}), ri.jobs[1]))
    best = {"goodput": _goodput_best, "joint": joint_best,
            "placement": lambda r: placement_best(placement_view(r).pi)[0]}[formulation]
    assert best(ri) > best(only_slow) + 1e-6
    result = solve_round(ri, solver="highs")
    assert result.status == "optimal"
    assert result.objective == pytest.approx(best(ri), abs=1e-6)
    fast, t4_only = result.allocations
    assert {g.node for g in fast.gpus} == {"n1"} and {g.node for g in t4_only.gpus} == {"n0"}
    if formulation == "goodput":
        _goodput_on_its_type(ri, result.allocations)


def test_placement_speeds_are_relative_to_the_jobs_fastest_type():
    pi = placement_view(replace(_two_types(), settings=Settings(formulation="placement"))).pi
    fast, t4_only = pi.jobs
    assert fast.speed_on("a100") == 1.0 and 0 < fast.speed_on("t4") < 1.0
    assert t4_only.type_speed == (("t4", 1.0),) and t4_only.speed_on("a100") == 0.0


def test_placement_refuses_a_job_without_parameters_for_any_type_offered():
    ri = _two_types()
    ri = replace(ri, jobs=(replace(ri.jobs[0], throughput={"k80": ri.jobs[0].throughput["t4"]}), ri.jobs[1]),
                 settings=Settings(formulation="placement"))
    with pytest.raises(InputError, match="parameters for none of the cluster's GPU types"):
        placement_model(ri)


def test_placement_refuses_a_job_larger_than_every_type_it_can_run_on():
    ri = replace(_two_types(), settings=Settings(formulation="placement"))
    ri = replace(ri, jobs=(replace(ri.jobs[1], requested_gpus=3, max_gpus=3,
                                   requested_bsz=3 * ri.jobs[1].batch.min_local_bsz),))
    with pytest.raises(InputError, match="needs 3 GPUs of one type it can run on; its types offer at most 2"):
        placement_model(ri)


def test_pal_greedy_keeps_every_job_on_a_type_with_room():
    """j0 (1 GPU) is cheapest on b's one fast GPU, which leaves 2 of b's 3 for j1 (3 GPUs), and a
    has 2: the walk's own choice places j0 and not j1, so it is made again on type_plan's types
    (j1 on b, j0 on a), and the exact model, started from it, reaches the brute force."""
    gpus = (PlacementGpu("n0/0", "n0", {"c": 1.5}, "a"), PlacementGpu("n0/1", "n0", {"c": 1.5}, "a"),
            PlacementGpu("n1/0", "n1", {"c": 1.5}, "b"), PlacementGpu("n1/1", "n1", {"c": 1.5}, "b"),
            PlacementGpu("n1/2", "n1", {"c": 1.0}, "b"))
    both = (("a", 1.0), ("b", 0.9))
    pi = PlacementInput(gpus, (PlacementJob("j0", 1, "c", type_speed=both), PlacementJob("j1", 3, "c", type_speed=both)))
    assert type_plan(pi) == {"j1": "b", "j0": "a"}
    greedy = pal_greedy(pi, np.random.default_rng(0))
    assert {j: tuple(sorted(g)) for j, g in greedy.items()} == {"j0": ("n0/0",), "j1": ("n1/0", "n1/1", "n1/2")}
    exact = solve_placement(pi, solver("highs"), start=greedy)
    assert exact.status == "optimal" and exact.objective == pytest.approx(placement_best(pi)[0], abs=1e-9)


def test_the_type_plan_is_exact_where_largest_first_runs_out():
    """a (6 GPUs, faster) and b (4): largest first puts the 4-GPU job on a, and then one 3-GPU
    job finds no room; the exact assignment puts it on b and both 3-GPU jobs on a."""
    gpus = tuple(PlacementGpu(f"{t}/{k}", t, {"c": 1.0}, t) for t, n in (("a", 6), ("b", 4)) for k in range(n))
    both = (("a", 1.0), ("b", 0.5))
    pi = PlacementInput(gpus, (PlacementJob("x", 4, "c", type_speed=both), PlacementJob("y", 3, "c", type_speed=both),
                               PlacementJob("z", 3, "c", type_speed=both)))
    assert type_plan(pi) == {"x": "b", "y": "a", "z": "a"}
    greedy = pal_greedy(pi, np.random.default_rng(0))
    assert {j: {g[0] for g in gpus} for j, gpus in greedy.items()} == {"x": {"b"}, "y": {"a"}, "z": {"a"}}


def test_a_job_set_that_does_not_fit_on_its_types_is_named():
    gpus = tuple(PlacementGpu(f"n{n}/{k}", f"n{n}", {"c": 1.0}, t) for n, t in enumerate("ab") for k in range(2))
    pi = PlacementInput(gpus, tuple(PlacementJob(f"j{i}", 2, "c", type_speed=(("a", 1.0),)) for i in range(2)))
    with pytest.raises(InputError, match=r"the jobs \(j0, j1\) do not fit on the GPU types they can run on together"):
        pal_greedy(pi, np.random.default_rng(0))


def test_a_large_placement_on_two_types_is_solved_in_windows_above_pal_greedy():
    """192 GPUs (above the exact model's 128) of two types, a third of the jobs on t4 only: the
    windows keep every job on one type it can run on and improve on PAL's greedy."""
    from test_placement import large_round

    ri = large_round(0, varied=True, nodes=48)
    nodes = tuple(replace(n, gpu_type="a100" if k % 2 else "t4") for k, n in enumerate(ri.cluster.nodes))
    jobs = []
    for i, job in enumerate(ri.jobs):
        params = job.throughput["default"]
        slow = replace(params, alpha_c=3 * params.alpha_c, beta_c=3 * params.beta_c)
        jobs.append(replace(job, throughput={"a100": params, "t4": slow} if i % 3 else {"t4": slow}))
    ri = replace(ri, cluster=replace(ri.cluster, nodes=nodes), jobs=tuple(jobs))
    view = placement_view(ri)
    result = solve_round(ri)
    assert "windows solved" in result.message
    assert result.objective > placement_objective(view.pi, pal_greedy(view.pi, np.random.default_rng(0))) + 1e-6
    _one_type_each(ri, result.allocations)
