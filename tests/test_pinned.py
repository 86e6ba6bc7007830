"""A mixed round's rules (batch limits by GPU type, a projected type, a pinned job) in the
placement formulation and in the policies that build their allocations themselves."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import numpy as np
import pytest

from schedlab import InputError, parse_round_input, solve_round
from schedlab.formulations.placement import build, build_pyomo
from schedlab.formulations.placement_greedy import pal_greedy
from schedlab.formulations.placement_problem import PlacementGpu, PlacementInput, PlacementJob
from schedlab.formulations.placement_round import placement_view, solve_placement
from schedlab.models.profiles import shipped_profiles
from schedlab.policies import make_policy
from schedlab.solvers.registry import solver
from schedlab.state import GpuRef, JobAllocation, RoundInput
from schedlab.verify import problems

SPEED = {"t4": 1.0, "v100": 1.8, "a100": 2.7}
PARAMS = {name: profile.params for name, profile in shipped_profiles().items()}
PINNED = (GpuRef("t0", 0), GpuRef("t0", 1))
# the types each job's parameters are projected for (from its T4 fit, by SPEED)
PROJECTED = {"tight": set(), "fit-t4": {"v100", "a100"}, "pinned": {"v100", "a100"}, "yolo": set(),
             "wide": set(), "late": set(), "last": set()}
GREEDY = ("pal", "pm_first", "packed_sticky", "packed_nonsticky", "random")
BUILDERS = ("tiresias", "optimus", "fifo", "ones", "gavel_las", "gavel_las_agnostic")


def _by_type(application: str) -> dict[str, dict]:
    """The application's parameters fitted on every type, each type as fast as SPEED says."""
    params = PARAMS[application]
    return {t: vars(params.projected(speed)) for t, speed in SPEED.items()}


def mixed_round(pressure: bool = False) -> dict:
    """Two 4-GPU T4 nodes, a 4-GPU V100 node, an 8-GPU A100 node; four jobs of 1-2 GPUs.

    `tight` is fastest on A100 but its batch (12 on 2 GPUs: 6 a GPU) is below its A100 local
    minimum (8); `fit-t4` has a T4 fit only, projected onto the faster types; `pinned` holds two
    T4 GPUs, though projected onto the A100s it would run 2.7 times as fast. With `pressure`,
    three older jobs of 8, 4 and 2 GPUs leave too few GPUs for every job: the pinned one,
    which has had the most service, comes last in a least-attained-service queue.
    """
    nodes = [{"id": "t0", "gpus": 4, "gpu_type": "t4"}, {"id": "t1", "gpus": 4, "gpu_type": "t4"},
             {"id": "v0", "gpus": 4, "gpu_type": "v100"}, {"id": "a0", "gpus": 8, "gpu_type": "a100"}]
    jobs = [
        {"id": "tight", "application": "bert", "throughput_params": _by_type("bert"), "requested_gpus": 2,
         "max_gpus": 2, "age_s": 9000,
         "batch_by_type": {"t4": {"max_local_bsz": 6}, "a100": {"min_local_bsz": 8, "max_local_bsz": 24}}},
        {"id": "fit-t4", "application": "cifar10", "throughput_params": {"t4": vars(PARAMS["cifar10"])},
         "requested_gpus": 2, "max_gpus": 2, "age_s": 3600},
        {"id": "pinned", "application": "deepspeech2", "throughput_params": {"t4": vars(PARAMS["deepspeech2"])},
         "current_gpus": [{"node": g.node, "gpu": g.gpu} for g in PINNED], "pinned": True, "requested_gpus": 2,
         "requested_bsz": 40, "max_gpus": 4, "age_s": 10, "attained_service_gpu_s": 1e6},
        {"id": "yolo", "application": "yolov3", "throughput_params": _by_type("yolov3"),
         "current_gpus": [{"node": "v0", "gpu": 0}], "requested_gpus": 1, "max_gpus": 1, "age_s": 5000},
    ]
    if pressure:
        jobs += [{"id": name, "application": "cifar10", "throughput_params": _by_type("cifar10"),
                  "requested_gpus": size, "max_gpus": size, "requested_bsz": 32 * size, "age_s": age_s}
                 for name, size, age_s in (("wide", 8, 20000), ("late", 4, 15000), ("last", 2, 12000))]
    return {"cluster": {"nodes": nodes, "gpu_speed": SPEED}, "jobs": jobs,
            "settings": {"formulation": "placement", "solver": "highs"}}


def _gpu_type(ri: RoundInput, gpu: GpuRef) -> str:
    return ri.cluster.nodes[ri.cluster.node_index[gpu.node]].gpu_type


def check_rules(ri: RoundInput, allocations: tuple[JobAllocation, ...]) -> None:
    """Verified; the pinned job on exactly its GPUs; each job's local batch within its bounds
    on the type of its GPUs; the projected flag exactly where its parameters were projected."""
    assert problems(ri, allocations) == []
    jobs = {job.id: job for job in ri.jobs}
    assert {job.id: set(job.projected_types) for job in ri.jobs} == {j: PROJECTED[j] for j in jobs}
    by_id = {a.job_id: a for a in allocations}
    assert set(by_id["pinned"].gpus) == set(PINNED) and not by_id["pinned"].restarted
    for a in allocations:
        types = {_gpu_type(ri, g) for g in a.gpus}
        if not types:
            assert not a.projected
            continue
        (gpu_type,) = types
        limits = jobs[a.job_id].batch_on(gpu_type)
        assert limits.min_local_bsz <= a.local_bsz <= limits.max_local_bsz, a
        assert a.projected == (gpu_type in PROJECTED[a.job_id]), a


@pytest.mark.parametrize("solver", ["highs", "appsi_highs", "cpsat"])
def test_the_placement_milp_honours_the_mixed_rounds_rules(solver):
    ri = parse_round_input(mixed_round())
    result = solve_round(ri, solver=solver)
    assert result.status == "optimal" and result.verified
    check_rules(ri, result.allocations)
    by_id = {a.job_id: a for a in result.allocations}
    # fit-t4 is fastest where projected: the flag shows on the answer
    assert _gpu_type(ri, by_id["fit-t4"].gpus[0]) == "a100" and by_id["fit-t4"].projected
    assert _gpu_type(ri, by_id["tight"].gpus[0]) != "a100"


def test_each_rule_changes_the_placement_milps_answer():
    """Without the pin the pinned job goes to the A100s, and without its limits by type tight
    does too: so the answer above holds because each rule is honoured."""
    ri = parse_round_input(mixed_round())
    loose = replace(ri, jobs=tuple(replace(job, pinned=False, batch_by_type={}) for job in ri.jobs))
    by_id = {a.job_id: a for a in solve_round(loose, solver="highs").allocations}
    assert {_gpu_type(ri, by_id[j].gpus[0]) for j in ("pinned", "tight")} == {"a100"}


def test_the_pin_is_a_column_bound_in_the_arrays_and_in_the_pyomo_twin():
    import pyomo.environ as pyo

    view = placement_view(parse_round_input(mixed_round()))
    pi = view.pi
    j = next(i for i, job in enumerate(pi.jobs) if job.pinned)
    model, twin = build(pi), build_pyomo(pi)
    arrays = model.arrays
    held = Counter(next(k for k, ids in enumerate(model.types) if g in ids) for g in pi.jobs[j].current_gpus)
    x = np.array(model.jobs[j].x)
    expected = np.array([held.get(k, 0) for k in range(len(x))], dtype=float)
    assert np.array_equal(arrays.col_lo[x], expected) and np.array_equal(arrays.col_hi[x], expected)
    assert [(v.lb, v.ub) for v in twin.columns] == list(zip(arrays.col_lo, arrays.col_hi))
    rows = Counter(key[0] for key in model.row_keys)
    assert rows == {c.local_name: len(c) for c in twin.component_objects(pyo.Constraint) if len(c)}


@pytest.mark.parametrize("name", GREEDY + ("milp", "milp_cpsat"))
def test_the_placement_policies_honour_the_mixed_rounds_rules(name):
    ri = parse_round_input(mixed_round())
    result = make_policy(name).schedule(ri)
    assert result.verified
    check_rules(ri, result.allocations)
    assert all(a.gpus for a in result.allocations)


def test_pals_greedy_places_the_pinned_job_on_its_gpus_where_it_would_move_it():
    ri = parse_round_input(mixed_round())
    loose = replace(ri, jobs=tuple(replace(job, pinned=False) for job in ri.jobs))
    held = {g.key for g in PINNED}
    assert set(pal_greedy(placement_view(ri).pi, np.random.default_rng(0))["pinned"]) == held
    assert set(pal_greedy(placement_view(loose).pi, np.random.default_rng(0))["pinned"]) != held


def _pinned_on_slow_spread() -> PlacementInput:
    """A 4-GPU node of typical GPUs and a 2-GPU node of slow ones; a pinned job holds GPUs 0 and 2
    of the first, which no greedy placement would choose for it, and a waiting job needs two."""
    gpus = tuple(PlacementGpu(f"n0/{k}", "n0", {"c": 1.0}) for k in range(4)) + tuple(
        PlacementGpu(f"n1/{k}", "n1", {"c": 1.3}) for k in range(2))
    jobs = (PlacementJob("pinned", 2, "c", ("n0/0", "n0/2"), pinned=True), PlacementJob("new", 2, "c"))
    return PlacementInput(gpus, jobs, across_node=1.7)


@pytest.mark.parametrize("name", GREEDY)
def test_every_greedy_placement_places_a_pinned_job_on_its_gpus(name):
    pi = _pinned_on_slow_spread()
    greedy = type(make_policy(name)).greedy
    assert greedy(pi, np.random.default_rng(0))["pinned"] == ("n0/0", "n0/2")
    loose = replace(pi, jobs=tuple(replace(job, pinned=False, current_gpus=()) for job in pi.jobs))
    assert greedy(loose, np.random.default_rng(0))["pinned"] != ("n0/0", "n0/2")  # not where it would go


@pytest.mark.parametrize("name", ["highs", "cpsat"])
def test_the_exact_placement_keeps_a_pinned_job_on_slow_gpus_it_would_leave(name):
    pi = _pinned_on_slow_spread()
    pi = replace(pi, jobs=(replace(pi.jobs[0], current_gpus=("n1/0", "n1/1")), pi.jobs[1]))
    found = solve_placement(pi, solver(name), start=pal_greedy(pi, np.random.default_rng(0)))
    assert found.placement["pinned"] == ("n1/0", "n1/1") and found.status == "optimal"
    loose = replace(pi, jobs=(replace(pi.jobs[0], pinned=False), pi.jobs[1]))
    unpinned = solve_placement(loose, solver(name), start=pal_greedy(loose, np.random.default_rng(0)))
    assert unpinned.placement["pinned"] != ("n1/0", "n1/1")
    assert unpinned.objective > found.objective


def test_a_pinned_job_not_on_its_gang_of_offered_gpus_is_refused():
    pi = _pinned_on_slow_spread()
    with pytest.raises(InputError, match="pinned to its 2 current GPUs, but needs 3"):
        replace(pi, jobs=(replace(pi.jobs[0], num_gpus=3), pi.jobs[1]))


# optimus is left out of the pressured round: type-blind, it grows jobs to counts that spill
# over nodes of several types, which verify refuses whatever the round's new fields
@pytest.mark.parametrize("name, pressure", [(name, False) for name in BUILDERS]
                         + [(name, True) for name in BUILDERS if name != "optimus"])
def test_the_policies_that_build_their_allocations_honour_the_mixed_rounds_rules(name, pressure):
    ri = parse_round_input(mixed_round(pressure))
    result = make_policy(name).schedule(ri)
    assert result.verified
    check_rules(ri, result.allocations)


@pytest.mark.parametrize("name, pressure", [("tiresias", True), ("optimus", False), ("gavel_las", False)])
def test_without_the_pin_a_policy_would_take_the_pinned_jobs_gpus(name, pressure):
    """Unpinned, the job waits (tiresias, behind the jobs of less service), grows (optimus, up
    to its max_gpus) or moves (Gavel's LAS, to a faster type): so it keeps its GPUs above
    because the pin is honoured."""
    ri = parse_round_input(mixed_round(pressure))
    loose = replace(ri, jobs=tuple(replace(job, pinned=False) for job in ri.jobs))
    by_id = {a.job_id: a for a in make_policy(name).schedule(loose).allocations}
    assert set(by_id["pinned"].gpus) != set(PINNED)


def test_a_type_blind_baseline_places_a_job_only_where_its_batch_fits():
    """tiresias takes the most free GPUs, the A100s, for its oldest job, tight, unless its
    limits by type rule them out."""
    ri = parse_round_input(mixed_round())
    tight = {a.job_id: a for a in make_policy("tiresias").schedule(ri).allocations}["tight"]
    assert _gpu_type(ri, tight.gpus[0]) != "a100"
    loose = replace(ri, jobs=tuple(replace(job, batch_by_type={}) for job in ri.jobs))
    tight = {a.job_id: a for a in make_policy("tiresias").schedule(loose).allocations}["tight"]
    assert _gpu_type(ri, tight.gpus[0]) == "a100"


def test_a_pinned_job_placed_on_other_than_the_gpus_it_holds_is_refused():
    raw = mixed_round()
    raw["jobs"][2]["requested_gpus"] = 1
    with pytest.raises(InputError) as exc:
        solve_round(raw)
    assert exc.value.problems == [
        "jobs[2].pinned: job 'pinned' is pinned to the 2 GPUs it holds, but the placement formulation places it on 1 "
        "(requested_gpus, else min_gpus); set requested_gpus to the GPUs it holds"]


def test_a_job_whose_batch_fits_no_type_waits_in_pals_queue_and_is_refused_by_the_formulation():
    raw = mixed_round()
    raw["jobs"][0]["batch_by_type"] = {t: {"min_local_bsz": 8, "max_local_bsz": 24} for t in SPEED}
    ri = parse_round_input(raw)
    result = make_policy("pal", {"backfill": True}).schedule(ri)
    by_id = {a.job_id: a for a in result.allocations}
    assert not by_id["tight"].gpus and set(by_id["pinned"].gpus) == set(PINNED)
    check_rules(ri, result.allocations)
    with pytest.raises(InputError) as exc:
        solve_round(ri)
    assert exc.value.problems == ["jobs[0]: its batch on 2 GPUs is 6 per GPU, outside [8, 24] on a100; 6 per GPU, "
                                  "outside [8, 24] on t4; 6 per GPU, outside [8, 24] on v100; change requested_gpus "
                                  "or its batch"]
