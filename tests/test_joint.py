"""The joint round is exact: every concrete placement enumerated, the Pyomo twin, and goodput as
its special case (no variability, no topology)."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace

import numpy as np
import pyomo.environ as pyo
import pytest
from brute_force import joint_best
from conftest import tiny_round

from schedlab.api import solve_round
from schedlab.bench import capacity_violations, random_round
from schedlab.clusters import ClusterSpec, make_cluster
from schedlab.formulations import FORMULATIONS
from schedlab.formulations.joint import joint_model
from schedlab.formulations.joint_decode import greedy_point, max_min_point
from schedlab.formulations.joint_options import enumerate_joint_options, vector_partitions
from schedlab.formulations.joint_structure import _maximal
from schedlab.milp import set_start
from schedlab.solvers.highs_direct import solve_highs
from schedlab.solvers.pyomo_backend import solve_appsi_highs
from schedlab.state import Cluster, GpuRef, Node, Rack, RoundInput, Settings, Topology
from schedlab.verify import verify


def _with_world(rng: np.random.Generator, ri: RoundInput, racks: bool, per_node: bool = False) -> RoundInput:
    """Random slowdowns (a few slow GPUs per class; with `per_node`, every GPU of a node alike, so
    that nodes make homogeneous pools) and, optionally, one rack per node with a slow uplink; jobs
    of classes A and B."""
    nodes = []
    for n in ri.cluster.nodes:
        draws, repeat = (1, n.gpus) if per_node else (n.gpus, 1)
        slow = {c: tuple(float(rng.choice([1.0, 1.0, 1.0, 1.5, 2.2])) for _ in range(draws)) * repeat
                for c in ("classA", "classB")}
        nodes.append(replace(n, slowdown=slow))
    topology = None
    if racks:
        topology = Topology(tuple(Rack(f"r{k}", (n.id,), uplink_gbps=25.0) for k, n in enumerate(nodes)),
                            node_gbps=100.0, across_node_factor=float(rng.choice([1.0, 1.3])))
    jobs = tuple(replace(j, app_class=str(rng.choice(["classA", "classB"]))) for j in ri.jobs)
    return replace(ri, cluster=Cluster(tuple(nodes), topology), jobs=jobs)


@pytest.mark.parametrize("p", [1.0, -1.0, -math.inf])
def test_joint_equals_brute_force_over_every_placement(p):
    rng = np.random.default_rng(7)
    for case in range(25):
        ri = _with_world(rng, tiny_round(rng, p=p, max_jobs=3, max_nodes=3), racks=bool(case % 2))
        result = solve_round(replace(ri, settings=replace(ri.settings, formulation="joint", mip_gap=0.0)))
        assert result.status == "optimal"
        expected = joint_best(ri)
        assert result.objective == pytest.approx(expected, abs=1e-6 * max(1.0, abs(expected))), case


def test_joint_equals_brute_force_where_many_nodes_share_a_signature():
    """Alike nodes (every GPU of a node alike, few tiers) make pools of several nodes whose slots
    and whole nodes several jobs share: still the optimum over every placement."""
    rng = np.random.default_rng(13)
    for case in range(12):
        base = tiny_round(rng, p=(1.0, -1.0, -math.inf)[case % 3], max_jobs=3, max_nodes=5)
        ri = _with_world(rng, base, racks=bool(case % 2), per_node=True)
        result = solve_round(replace(ri, settings=replace(ri.settings, formulation="joint", mip_gap=0.0)))
        assert result.status == "optimal"
        expected = joint_best(ri)
        assert result.objective == pytest.approx(expected, abs=1e-6 * max(1.0, abs(expected))), case


def _alike_heterogeneous(rng: np.random.Generator, ri: RoundInput, racks: bool) -> RoundInput:
    """Every node's GPUs differ alike: the same slowdowns per class, each node's in its own order
    (so its slices are other GPU indices), on one rack or two; jobs of classes A and B."""
    first = {"classA": (1.0, 2.2, 1.0, 1.0), "classB": (1.0, 1.0, 1.5, 1.0)}
    nodes = []
    for n in ri.cluster.nodes:
        order = rng.permutation(n.gpus)
        nodes.append(replace(n, slowdown={c: tuple(first[c][i] for i in order) for c in first}))
    topology = None
    if racks:
        halves = [tuple(n.id for n in nodes[: len(nodes) // 2]), tuple(n.id for n in nodes[len(nodes) // 2:])]
        topology = Topology(tuple(Rack(f"r{k}", ids, uplink_gbps=25.0) for k, ids in enumerate(halves) if ids),
                            node_gbps=100.0)
    jobs = tuple(replace(j, app_class=str(rng.choice(["classA", "classB"]))) for j in ri.jobs)
    return replace(ri, cluster=Cluster(tuple(nodes), topology), jobs=jobs)


def test_joint_equals_brute_force_where_heterogeneous_nodes_are_alike():
    """Nodes whose GPUs differ alike (wherever on the node) make one pool per rack, shared out by
    counted patterns among the nodes running jobs hold alike, by one job or several: still the
    optimum over every placement, and the pools did hold several nodes."""
    rng = np.random.default_rng(17)
    pooled = binned = 0
    for case in range(60):
        base = tiny_round(rng, p=(1.0, -1.0, -math.inf)[case % 3], max_jobs=3, max_nodes=4)
        ri = _alike_heterogeneous(rng, base, racks=bool(case % 2))
        ri = replace(ri, settings=replace(ri.settings, formulation="joint", mip_gap=0.0))
        model = joint_model(ri)
        pooled += any(len(pool.nodes) > 1 and not pool.homogeneous for pool in model.opts.cluster.pools)
        binned += any(len(b.nodes) > 1 for b in model.st.bins)
        result = solve_round(ri)
        assert result.status == "optimal"
        expected = joint_best(ri)
        assert result.objective == pytest.approx(expected, abs=1e-6 * max(1.0, abs(expected))), case
    assert pooled >= 20 and binned >= 3, (pooled, binned)


def test_a_node_running_several_jobs_is_shared_out_once():
    """Two alike nodes of two fast and two slow GPUs; one runs a job on a fast GPU and one on a
    slow one, both restarted too often to move. Each alone would leave 3 GPUs for a 3-GPU job,
    but together they leave 2, so while both stay only the other node takes one of the two
    3-GPU jobs ((lone): the node takes one pattern, not one per running job)."""
    base = tiny_round(np.random.default_rng(1), max_jobs=4, max_nodes=1)
    fast_slow = {"classA": (1.0, 2.2, 1.0, 2.2)}
    nodes = (Node("a", 4, slowdown=fast_slow), Node("b", 4, slowdown={"classA": (2.2, 1.0, 2.2, 1.0)}))
    jobs = tuple(replace(job, id=f"j{i}", app_class="classA", min_gpus=1 if i < 2 else 3, max_gpus=1 if i < 2 else 3,
                         current_gpus=(GpuRef("a", i),) if i < 2 else (), age_s=100.0, num_restarts=5)
                 for i, job in enumerate(base.jobs[:1] * 4))
    ri = RoundInput(Cluster(nodes), jobs, replace(base.settings, formulation="joint", mip_gap=0.0))
    model = joint_model(ri)
    assert [len(pool.nodes) for pool in model.opts.cluster.pools] == [2] and [b.lone for b in model.st.bins] == [True]
    result = solve_round(ri)
    assert result.status == "optimal" and result.verified
    assert result.objective == pytest.approx(joint_best(ri), rel=1e-9)


def test_a_jobs_options_do_not_grow_with_alike_nodes():
    """Options name kinds of placement, not nodes: twice the alike nodes, the same options."""
    rng = np.random.default_rng(4)
    ri = _with_world(rng, tiny_round(rng, max_jobs=6, max_nodes=2), racks=False, per_node=True)

    def copies(count: int) -> RoundInput:
        return replace(ri, cluster=Cluster(tuple(replace(n, id=f"{n.id}-{copy}") if copy else n
                                                 for copy in range(count) for n in ri.cluster.nodes)))

    small, large = enumerate_joint_options(copies(4), prune=False), enumerate_joint_options(copies(8), prune=False)
    assert small.num_options == large.num_options > 0  # no job spans more than two of the first nodes


def _twin_rounds(seed: int, count: int):
    """Joint rounds of every kind: p = 1, -1 and -inf (max-min), per-GPU and per-node variability,
    racks or none, running jobs on arbitrary GPUs (nodes with one and with several stayers) and
    rounds whose jobs all opt in to freezing."""
    rng = np.random.default_rng(seed)
    for case in range(count):
        p = (1.0, -1.0, -math.inf)[case % 3]
        if case % 4 == 3:
            base = random_round(rng, 16, int(rng.integers(3, 10)), settings=Settings(p=p), freeze_fraction=1.0)
        else:
            base = tiny_round(rng, p=p, max_jobs=7, max_nodes=4)
        ri = _with_world(rng, base, racks=bool(case % 2), per_node=case % 6 < 3)
        yield replace(ri, settings=replace(ri.settings, formulation="joint", mip_gap=0.0))


def _pyomo_violation(model: pyo.ConcreteModel) -> float:
    """The largest violation of any constraint of a Pyomo model at its variables' values."""
    worst = 0.0
    for row in model.component_data_objects(pyo.Constraint, active=True):
        body = pyo.value(row.body)
        worst = max(worst, pyo.value(row.lower) - body if row.has_lb() else 0.0,
                    body - pyo.value(row.upper) if row.has_ub() else 0.0)
    return worst


def test_joint_pyomo_twin_is_the_same_model():
    """The twin is written from the docstring's algebra, the arrays from their own rows: solved
    apart (highspy on the arrays, appsi_highs on Pyomo), they reach the same optimum and LP bound,
    and each one's optimum is a point of the other with the same objective (so the columns are in
    the same order)."""
    rows: dict[str, int] = {}
    for ri in _twin_rounds(seed=11, count=36):
        model = joint_model(ri)
        arrays, twin = model.arrays(), model.pyomo()
        for tag in ("one", "demand", "level", "slots", "node", "lone", "stay", "comp", "whole", "rack", "minspd"):
            rows[tag] = rows.get(tag, 0) + len(getattr(twin, tag, ()))
        by_arrays, by_twin = solve_highs(arrays, 30.0, 0.0), solve_appsi_highs(twin, 30.0, 0.0)
        assert by_arrays.status == by_twin.status == "optimal"
        tol = 1e-6 * max(1.0, abs(by_arrays.objective))
        assert by_twin.objective == pytest.approx(by_arrays.objective, abs=tol)
        assert arrays.max_violation(by_twin.values) <= 1e-6
        assert arrays.objective(by_twin.values) == pytest.approx(by_arrays.objective, abs=tol)
        set_start(twin, by_arrays.values)
        assert _pyomo_violation(twin) <= 1e-6
        assert pyo.value(twin.obj) == pytest.approx(by_arrays.objective, abs=tol)

        lp_arrays = solve_highs(replace(arrays, integer=np.zeros(arrays.num_cols, dtype=bool)), 30.0, 0.0)
        pyo.TransformationFactory("core.relax_integer_vars").apply_to(twin)
        lp_twin = solve_appsi_highs(twin, 30.0, 0.0)
        assert lp_arrays.status == lp_twin.status == "optimal"
        assert lp_twin.objective == pytest.approx(lp_arrays.objective, abs=tol)
    assert min(rows.values()) > 0 and len(rows) == 11, rows  # the rounds exercised every constraint


def test_joint_without_variability_or_topology_is_the_goodput_round():
    rng = np.random.default_rng(3)
    for p in (1.0, -1.0, -math.inf):
        for _ in range(8):
            ri = tiny_round(rng, p=p, max_jobs=6, max_nodes=4)
            ri = replace(ri, settings=replace(ri.settings, mip_gap=0.0))
            goodput = solve_round(ri)
            joint = solve_round(ri, formulation="joint")
            assert joint.status == goodput.status == "optimal"
            assert joint.objective == pytest.approx(goodput.objective, abs=1e-6 * max(1.0, abs(goodput.objective)))


def test_joint_gives_a_job_the_fast_gpus_and_prices_a_slow_uplink():
    nodes = tuple(Node(f"n{k}", 4, slowdown={"classA": (1.0, 3.0, 1.0, 1.0)}) for k in range(2))
    ri = tiny_round(np.random.default_rng(0), max_jobs=1, max_nodes=1)
    job = replace(ri.jobs[0], current_gpus=(), app_class="classA", min_gpus=2, max_gpus=2)
    round_ = RoundInput(Cluster(nodes), (job,), replace(ri.settings, formulation="joint"))
    result = solve_round(round_)
    verify(round_, result.allocations)
    assert {g.gpu for g in result.allocations[0].gpus}.isdisjoint({1})
    model = joint_model(round_)
    assert model.opts.speedup.max() > 0


def test_decode_realizes_every_optimum_on_larger_rounds():
    rng = np.random.default_rng(5)
    for case in range(4):
        ri = _with_world(rng, tiny_round(rng, max_jobs=12, max_nodes=6), racks=bool(case % 2))
        result = solve_round(replace(ri, settings=replace(ri.settings, formulation="joint")))
        assert result.status == "optimal" and result.verified


def test_joint_folds_freeze_levels_in_as_the_goodput_round_does():
    rng = np.random.default_rng(9)
    froze = False
    for p in (1.0, -1.0):
        for _ in range(4):
            ri = random_round(rng, 16, 8, settings=replace(tiny_round(rng).settings, p=p, mip_gap=0.0),
                              freeze_fraction=1.0)
            goodput = solve_round(ri)
            joint = solve_round(ri, formulation="joint")
            assert joint.status == goodput.status == "optimal"
            assert joint.objective == pytest.approx(goodput.objective, abs=1e-6 * max(1.0, abs(goodput.objective)))
            froze |= any(a.frozen_groups for a in joint.allocations)
    assert froze  # the rounds did exercise freezing


@pytest.mark.parametrize("freeze_fraction", [0.0, 1.0])
def test_joint_values_an_answer_as_its_model_does(freeze_fraction):
    """The registry's value of an answer (how a partitioned one is scored) is the model's
    objective at the solver's own answer: every placement read back as its option."""
    rng = np.random.default_rng(8)
    for case in range(6):
        base = random_round(rng, 32, 12, settings=Settings(p=(1.0, -1.0)[case % 2]), freeze_fraction=freeze_fraction)
        ri = _with_world(rng, base, racks=bool(case % 2), per_node=case % 3 == 0)
        ri = replace(ri, settings=replace(ri.settings, formulation="joint"))
        result = solve_round(ri)
        assert FORMULATIONS["joint"].value(ri, result.allocations) == pytest.approx(result.objective, rel=1e-9)


def test_a_failed_solver_still_gets_a_verified_greedy_answer(monkeypatch):
    from schedlab.milp import FAILED, SolveOutcome
    from schedlab.solvers.registry import SOLVERS

    failed = SolveOutcome(FAILED, None, math.nan, math.nan, 0.1, "x")
    monkeypatch.setitem(SOLVERS, Settings.solver, lambda model, s: (failed, 0.0))
    rng = np.random.default_rng(2)
    for case in range(6):
        ri = _with_world(rng, tiny_round(rng, max_jobs=10, max_nodes=5), racks=bool(case % 2))
        result = solve_round(replace(ri, settings=replace(ri.settings, formulation="joint")))
        assert result.status == "fallback" and result.verified
        running = [j for j in ri.jobs if j.running]
        for job in running:  # running jobs keep their GPUs (no restart)
            assert result.allocation(job.id).gpus == tuple(sorted(job.current_gpus)) or not result.allocation(job.id).gpus
        assert any(a.gpus for a in result.allocations)


def test_the_max_min_floor_serves_every_job_validly_and_never_above_the_optimum():
    rng = np.random.default_rng(4)
    served_rounds = 0
    for case in range(24):
        ri = _with_world(rng, tiny_round(rng, p=-math.inf, max_jobs=3, max_nodes=3), racks=bool(case % 2))
        ri = replace(ri, settings=replace(ri.settings, formulation="joint"))
        model = joint_model(ri)
        served = max_min_point(model.opts, model.st)
        if served is None:
            continue
        served_rounds += 1
        allocations = model.decode(served)
        verify(ri, allocations)
        assert all(a.gpus for a in allocations) and min(a.speedup for a in allocations) > 0, case
        expected = joint_best(ri)
        assert model.objective(served) <= expected + 1e-6 * max(1.0, abs(expected)), case
        assert model.objective(model.fallback()) >= model.objective(greedy_point(model.opts, model.st)), case
    assert served_rounds >= 16


def test_a_joint_round_without_jobs_or_without_gpus_is_answered():
    rng = np.random.default_rng(6)
    ri = _with_world(rng, tiny_round(rng, max_jobs=4, max_nodes=3), racks=True)
    ri = replace(ri, settings=replace(ri.settings, formulation="joint"))
    assert solve_round(replace(ri, jobs=())).allocations == ()
    drained = replace(ri, cluster=replace(ri.cluster, nodes=tuple(replace(n, gpus=0, slowdown={}) for n in ri.cluster.nodes)),
                      jobs=tuple(replace(j, current_gpus=()) for j in ri.jobs))
    result = solve_round(drained)
    assert result.verified and not any(a.gpus for a in result.allocations)


@pytest.mark.parametrize("shape", [(2, 1), (1, 1, 1, 1), (3, 2, 1), (1, 1, 1, 1, 1, 1, 1)])
def test_a_nodes_patterns_are_the_maximal_ones_of_its_partitions(shape):
    # pool_patterns keeps, of the partitions of a node's GPUs cut to the used parts, those no other
    # contains (as multisets of parts): the bit-set filter must keep what comparing every pair keeps
    rng = np.random.default_rng(len(shape))
    parts = sorted({m for pattern in vector_partitions(shape) for m in pattern})
    for _ in range(5):
        used = {m for m in parts if rng.random() < 0.6}
        kept = sorted({tuple(m for m in pattern if m in used) for pattern in vector_partitions(shape)})
        counts = [Counter(pattern) for pattern in kept]
        pairwise = [pattern for pattern, count in zip(kept, counts)
                    if not any(other != count and all(other[m] >= k for m, k in count.items()) for other in counts)]
        assert _maximal(kept) == pairwise and len(pairwise) < len(kept)


def test_a_joint_model_too_large_to_build_in_time_answers_the_goodput_greedy():
    # Nodes of 12 GPUs in 7 slices of tiers (tier_tolerance 0.01) took 30 s to build, whatever the
    # limit: the time limit bounds the build, and the answer is still verified.
    cluster = make_cluster(ClusterSpec(num_nodes=2, gpus_per_node=12, racks=1, variability="centroids", seed=1))[0]
    settings = Settings(formulation="joint", tier_tolerance=0.01, time_limit_s=0.5)
    ri = replace(random_round(np.random.default_rng(1), 24, 3, 12, settings=settings), cluster=cluster)
    result = solve_round(ri)
    assert result.status == "fallback" and result.verified and result.bound_timed_out
    assert "joint model was not built within the time limit" in result.message and "tier_tolerance" in result.message
    assert math.isnan(result.objective) and capacity_violations(ri, result.allocations) == []
    assert any(a.gpus for a in result.allocations)  # the goodput round's greedy, not nothing
