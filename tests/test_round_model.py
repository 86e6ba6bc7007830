"""The round model is exact: brute force, backend agreement, and the Pyomo/array identity."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import scipy.sparse as sp
from brute_force import best_objective, feasible_choices
from conftest import tiny_round

from schedlab.bench import random_round
from schedlab.formulations.goodput import build_arrays, build_pyomo, decode, objective_value
from schedlab.formulations.options import enumerate_options, prune_dominated
from schedlab.formulations.packing import NodeState
from schedlab.milp import Rows, stack_rows
from schedlab.solvers.cpsat import solve_cpsat
from schedlab.solvers.highs_direct import solve_highs
from schedlab.solvers.pyomo_backend import solve_appsi_highs
from schedlab.state import Cluster, GpuRef, Node, Settings
from schedlab.verify import verify

P_VALUES = (1.0, -1.0, -math.inf)


def _with_p(ri, p):
    return replace(ri, settings=replace(ri.settings, p=p))


def _solve(opts, solver=solve_highs):
    out = solver(build_arrays(opts), 30.0, 0.0)
    assert out.status == "optimal"
    return out, out.values[: opts.num_options] > 0.5


def _check_tiny_rounds(seed: int, count: int, max_jobs: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(count):
        base = tiny_round(rng, max_jobs=max_jobs)
        choices = feasible_choices(enumerate_options(_with_p(base, 1.0), prune=False))
        for p in P_VALUES:
            ri = _with_p(base, p)
            full = enumerate_options(ri, prune=False)  # brute force sees every option
            opts = enumerate_options(ri)  # the solver sees the pruned set
            expected = best_objective(full, choices)
            highs, chosen = _solve(opts)
            cpsat, chosen_cp = _solve(opts, solve_cpsat)
            tol = 1e-6 * max(1.0, abs(expected))
            assert objective_value(opts, chosen) == pytest.approx(expected, abs=tol), (p, ri)
            assert objective_value(opts, chosen_cp) == pytest.approx(expected, abs=1e-4 * max(1, abs(expected)))
            verify(ri, decode(opts, chosen))  # the counted optimum is realizable on real GPUs
            verify(ri, decode(opts, chosen_cp))


def test_milp_equals_brute_force_on_tiny_rounds():
    _check_tiny_rounds(seed=1, count=200, max_jobs=5)


@pytest.mark.slow
def test_milp_equals_brute_force_on_many_tiny_rounds():
    _check_tiny_rounds(seed=2, count=400, max_jobs=6)


@pytest.mark.parametrize("p", P_VALUES)
def test_pyomo_and_array_builds_are_the_same_model(p):
    rng = np.random.default_rng(7)
    for _ in range(15):
        ri = random_round(rng, 32, int(rng.integers(5, 30)), settings=Settings(p=p))
        opts = enumerate_options(ri)
        arrays, chosen = _solve(opts)
        pyomo = solve_appsi_highs(build_pyomo(opts), 30.0, 0.0)
        assert pyomo.status == "optimal"
        assert pyomo.objective == pytest.approx(arrays.objective, rel=1e-6, abs=1e-9)
        chosen = pyomo.values[: opts.num_options] > 0.5
        assert objective_value(opts, chosen) == pytest.approx(arrays.objective, rel=1e-6, abs=1e-9)


def test_warm_start_point_is_feasible_and_keeps_running_jobs():
    rng = np.random.default_rng(3)
    for _ in range(30):
        ri = tiny_round(rng, p=float(rng.choice([1.0, -1.0, -math.inf])))
        opts = enumerate_options(ri)
        model = build_arrays(opts)
        assert model.max_violation(model.start) <= 1e-9
        stays = model.start[: opts.num_options] > 0.5
        assert set(opts.job[stays]) == set(opts.stay_nodes)


def test_highspy_and_ortools_solve_in_one_process():
    # Both libraries ship a libhighs; the pin (highspy 1.12.0 with ortools 9.15) keeps them compatible.
    import highspy  # noqa: F401
    from ortools.sat.python import cp_model  # noqa: F401

    opts = enumerate_options(random_round(np.random.default_rng(0), 16, 8))
    a, _ = _solve(opts)
    b, _ = _solve(opts, solve_cpsat)
    assert a.objective == pytest.approx(b.objective, rel=1e-5)


@pytest.mark.parametrize("nnz", [60, 9000])  # sorted into CSR by stack_rows, and left to scipy's conversion
def test_stacked_rows_are_the_canonical_matrix_of_their_entries(nnz):
    """Entries of one (row, column) summed, each row's columns in order: what HiGHS is handed."""
    rng = np.random.default_rng(nnz)
    blocks, triplets = [], []
    for first_row in (0, 7, 19):  # three blocks of 7, 12 and 5 rows, with repeated (row, column) entries
        b, size = Rows(), {0: 7, 7: 12, 19: 5}[first_row]
        r, c, v = rng.integers(0, size, nnz // 3), rng.integers(0, 10, nnz // 3), rng.normal(size=nnz // 3)
        b.extend([(k,) for k in range(size)], r, c, v, -math.inf, 1.0)
        blocks.append(b)
        triplets.append((r + first_row, c, v))
    A, lo, hi = stack_rows(blocks, 10)
    row, col, val = (np.concatenate(t) for t in zip(*triplets))
    dense = np.zeros((24, 10))
    np.add.at(dense, (row, col), val)
    assert A.shape == (24, 10) and len(lo) == len(hi) == 24 and A.nnz < len(row)  # some entries summed
    assert A.has_canonical_format and np.allclose(A.toarray(), dense, rtol=1e-12, atol=1e-12)
    assert all((np.diff(A.indices[A.indptr[k]:A.indptr[k + 1]]) > 0).all() for k in range(24))
    expected = sp.csr_matrix((val, (row, col)), shape=(24, 10))
    assert np.array_equal(A.indices, expected.indices) and np.array_equal(A.data, expected.data)


@pytest.mark.parametrize("shuffled", [False, True])  # options as enumerate_options orders them, and in any order
def test_pruning_keeps_exactly_the_shapes_worth_more_than_every_smaller_one_of_their_group(shuffled):
    """An option is dominated where a smaller shape of its job and group is worth as much or more
    (ties and -inf values included); stays, and each group's smallest shape, are always kept."""
    rng = np.random.default_rng(3)
    for _ in range(20):
        rows = [(j, g, d) for j in range(6) for g in range(3) if rng.random() < 0.8
                for d in sorted(rng.choice(16, rng.integers(1, 6), replace=False) + 1)]
        rows += [(j, -1, int(rng.integers(1, 9))) for j in range(6) if rng.random() < 0.5]
        rows.sort(key=lambda r: (r[0], r[1] < 0, r[1], r[2]))
        job, group, gpus = (np.array(col) for col in zip(*rows))
        value = rng.choice([-np.inf, 0.5, 1.0, 1.5, 2.0], len(rows))  # few values: many ties
        if shuffled:
            order = rng.permutation(len(rows))
            job, group, gpus, value = job[order], group[order], gpus[order], value[order]
        expected = [g < 0 or not any(job[k] == j and group[k] == g and gpus[k] < d and value[k] >= v
                                     for k in range(len(job)))
                    for j, g, d, v in zip(job, group, gpus, value)]
        assert prune_dominated(job, group, gpus, value).tolist() == expected


def test_decoding_takes_a_stayers_gpus_once_and_places_new_shapes_beside_what_stayers_left():
    # Stayers are taken first, each from nodes still wholly free or not; a GPU already taken is
    # never taken again (nor any GPU of the tuple that names it), and new shapes go best fit
    # into what the stayers left.
    state = NodeState(Cluster(tuple(Node(f"n{k}", 4) for k in range(3))))
    assert state.take_exact((GpuRef("n0", 1), GpuRef("n0", 2), GpuRef("n1", 0)))
    assert state.free_gpus == 9 and list(state.free[0]) == [0, 3] and list(state.free[1]) == [1, 2, 3]
    assert not state.take_exact((GpuRef("n0", 2),))
    assert not state.take_exact((GpuRef("n2", 0), GpuRef("n0", 1)))
    assert state.free_gpus == 9 and list(state.free[2]) == [0, 1, 2, 3]
    assert state.take_exact((GpuRef("n0", 3),))
    refs = state.take_shape((0, 1, 2), 2, 2)  # 1, 3 and 4 GPUs free: n1 and n2 fit best
    assert refs == (GpuRef("n1", 1), GpuRef("n1", 2), GpuRef("n2", 0), GpuRef("n2", 1))
    assert state.free_gpus == 4 and state.take_shape((0, 1, 2), 1, 3) is None


def test_single_node_takes_at_once_are_the_takes_one_by_one():
    """take_shapes places `count` single-node shapes as `count` take_shape calls would, GPU
    for GPU and in order, from nodes of mixed sizes partly held, also where they do not all fit
    (the ones that do), and leaves the same state behind."""
    rng = np.random.default_rng(11)
    for _ in range(300):
        cluster = Cluster(tuple(Node(f"n{k}", int(rng.choice([2, 4, 8]))) for k in range(int(rng.integers(1, 9)))))
        held = tuple(GpuRef(n.id, i) for n in cluster.nodes for i in range(n.gpus) if rng.random() < 0.4)
        nodes = tuple(int(k) for k in rng.permutation(len(cluster.nodes)))
        z, count = int(rng.choice([1, 2, 4])), int(rng.integers(1, 12))
        one, many = NodeState(cluster), NodeState(cluster)
        for state in (one, many):
            state.take_exact(held)
            state.take_shape(nodes, 1, 1)  # a group bucketed before, as a round's decoding has it
        singles = []
        for _ in range(count):
            if (refs := one.take_shape(nodes, 1, z)) is None:
                break
            singles.append(refs)
        assert many.take_shapes(nodes, 1, z, count) == singles
        assert [list(f) for f in many.free] == [list(f) for f in one.free] and many.free_gpus == one.free_gpus
        assert many.take_shape(nodes, 1, 1) == one.take_shape(nodes, 1, 1)  # the buckets kept in step
