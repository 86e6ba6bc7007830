"""Pollux's models: the fit reproduces the tables; efficiency and goodput match hand values."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from schedlab.models.efficiency import best_batch, efficiency, gain, goodput
from schedlab.models.profiles import APPLICATIONS, fit_application, measured_table, shipped_profiles, table_fields
from schedlab.models.throughput import canonical_placement, fit_throughput_params, step_time_s, throughput
from schedlab.state import BatchLimits, GradStats, ThroughputParams

# Step-time RMSLE of the 7-parameter model over each application's 500-1,700 measured points
# (1-64 GPUs). Measured: 0.103-0.132; the bound leaves room for solver-version noise only.
MAX_FIT_RMSLE = 0.14


@pytest.mark.parametrize("app", APPLICATIONS)
def test_fitted_model_reproduces_measured_tables(app):
    params, err = fit_application(app)
    assert err <= MAX_FIT_RMSLE
    shipped = shipped_profiles()[app]
    assert shipped.fit_rmsle == pytest.approx(err, abs=0.01)  # profiles.json is current
    pts = measured_table(app).points()
    pred = step_time_s(shipped.params, pts.num_nodes.to_numpy(), pts.num_replicas.to_numpy(), pts.local_bsz.to_numpy())
    assert np.sqrt(np.mean(np.log(pred / pts.step_time.to_numpy()) ** 2)) <= MAX_FIT_RMSLE


def test_efficiency_and_gain_match_hand_computation():
    grad = GradStats(sqr=1.0, var=3.0)
    # M0 = 100, M = 400: scale 4, gain (3 + 1) / (3/4 + 1) = 16/7, efficiency 4/7 = (phi + M0)/(phi + M), phi = 300
    assert gain(grad, 100, 400) == pytest.approx(16 / 7)
    assert efficiency(grad, 100, 400) == pytest.approx(4 / 7)
    assert efficiency(grad, 100, 100) == pytest.approx(1.0)


def test_goodput_matches_hand_computation():
    p = ThroughputParams(alpha_c=0.1, beta_c=0.01, alpha_n=0.5, beta_n=0.1, alpha_r=0.2, beta_r=0.05, gamma=1.0)
    # 1 node, 4 GPUs, micro-batch 10, 1 accumulation step: T_c = 0.2, T_n = 0.2 + 0.05 * 2 = 0.3,
    # T_iter = 0.2 + (0.2 + 0.3) = 0.7 s for 4 * 10 * 2 = 80 examples.
    assert step_time_s(p, 1, 4, 10, 1) == pytest.approx(0.7)
    assert throughput(p, 1, 4, 10, 1) == pytest.approx(80 / 0.7)
    grad = GradStats(sqr=1.0, var=3.0)  # M0 = 20, M = 80 -> efficiency (60 + 20) / (60 + 80)
    assert goodput(p, grad, 20, 1, 4, 10, 1) == pytest.approx(80 / 0.7 * 80 / 140)
    # Two nodes use the network terms: T_n = 0.5 + 0.1 * 2
    assert step_time_s(p, 2, 4, 10, 0) == pytest.approx(0.2 + 0.7)


def test_large_gamma_overlaps_compute_and_sync():
    p = ThroughputParams(0.1, 0.0, 0.3, 0.0, 0.3, 0.0, gamma=10.0)
    assert step_time_s(p, 2, 2, 1) == pytest.approx(0.3, rel=1e-3)


def test_best_batch_respects_limits_and_accumulates():
    prof = shipped_profiles()["yolov3"]  # max micro-batch 8
    choice = best_batch(prof.params, prof.grad_stats, prof.batch, [1, 1, 2], [1, 4, 8])
    assert np.all(choice.goodput > 0)
    assert np.all(choice.local_bsz <= 8) and np.all(choice.local_bsz >= prof.batch.min_local_bsz)
    total = np.array([1, 4, 8]) * choice.local_bsz * (choice.accum_steps + 1)
    assert np.all(total <= prof.batch.max_bsz) and np.all(total >= prof.batch.init_bsz)


def test_best_batch_beats_every_fixed_batch_on_its_grid():
    prof = shipped_profiles()["cifar10"]
    best = best_batch(prof.params, prof.grad_stats, prof.batch, [1], [4]).goodput[0]
    for bsz in (128, 256, 512, 1024):
        assert best >= best_batch(prof.params, prof.grad_stats, prof.batch, [1], [4], fixed_bsz=bsz).goodput[0] - 1e-9


def test_best_batch_of_many_shapes_is_each_shapes_own():
    """Thousands of shapes are valued in blocks, with a mix of per-shape and shared parameters;
    each must get exactly what it gets valued alone."""
    from schedlab.models.efficiency import _BLOCK_SHAPES

    prof = shipped_profiles()["bert"]
    rng = np.random.default_rng(0)
    count = 2 * _BLOCK_SHAPES + 17
    gamma = rng.uniform(1.0, 3.0, count)
    params = replace(prof.params, gamma=gamma)
    nodes = rng.integers(1, 4, count)
    gpus = nodes * rng.integers(1, 9, count)
    fixed = np.where(rng.random(count) < 0.1, 512, 0)
    many = best_batch(params, prof.grad_stats, prof.batch, nodes, gpus, fixed)
    for i in rng.choice(count, 40, replace=False):
        one = best_batch(replace(prof.params, gamma=gamma[i]), prof.grad_stats, prof.batch, nodes[i], gpus[i], fixed[i])
        assert (many.goodput[i], many.local_bsz[i], many.accum_steps[i]) == (one.goodput[0], one.local_bsz[0],
                                                                             one.accum_steps[0])


def test_shared_valuation_from_memoized_grids_is_the_grids_computed_anew(monkeypatch):
    """best_batch_shared's grids come from a memo kept across calls: whether a shape's grid was
    just computed, found from an earlier call (by its numbers or by a key given for them, and then
    valued on its envelope), or computed again after the memo started over, every row gets, bit for
    bit, what grids computed for that call alone give it."""
    from schedlab.models import efficiency

    monkeypatch.setattr(efficiency, "_GRID_MEMO", efficiency._GridMemo())
    monkeypatch.setattr(efficiency, "ENVELOPE_AFTER_ROWS", 1)  # a table met again is valued on its envelope
    prof = shipped_profiles()["cifar10"]
    rng = np.random.default_rng(3)
    shapes = 8
    on_shapes = lambda obj: type(obj)(*(np.full(shapes, v, dtype=float) for v in vars(obj).values()))  # noqa: E731
    for _ in range(8):
        gamma = rng.choice([1.2, 1.5, 2.0], shapes)  # few models: later calls meet earlier shapes
        nodes = rng.integers(1, 3, shapes)
        gpus = nodes * rng.choice([1, 2, 4], shapes)
        args = (replace(on_shapes(prof.params), gamma=gamma), on_shapes(prof.batch), nodes, gpus, np.zeros(shapes),
                GradStats(prof.grad_stats.sqr * rng.uniform(0.2, 5.0, 20), np.full(20, prof.grad_stats.var)),
                rng.integers(0, shapes, 20))
        keys = [(float(g), int(n), int(r)) for g, n, r in zip(gamma, nodes, gpus)] if rng.random() < 0.5 else None
        monkeypatch.setattr(efficiency, "GRID_MEMO_SHAPES", 12)  # starts over within these calls
        got = efficiency.best_batch_shared(*args, keys)
        monkeypatch.setattr(efficiency, "GRID_MEMO_SHAPES", 0)  # no memo: every grid computed anew
        anew = efficiency.best_batch_shared(*args)
        for name in ("goodput", "local_bsz", "accum_steps"):
            assert np.array_equal(getattr(got, name), getattr(anew, name))
    assert 0 < len(efficiency._GRID_MEMO) <= 12


def _adversarial_tables(rng: np.random.Generator, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Grid tables (throughput, total batch) of every kind the envelope must get right: Pollux's
    shapes (throughput rising, then flat where a larger batch no longer helps), points repeated,
    equal throughputs at many batches, points that cannot run, none that can, one batch only."""
    from schedlab.models.efficiency import BATCH_GRID_POINTS, _grid_tables

    points = BATCH_GRID_POINTS
    prof = shipped_profiles()["imagenet"]
    on = lambda obj, n: type(obj)(*(np.full(n, v, dtype=float) for v in vars(obj).values()))  # noqa: E731
    nodes = rng.integers(1, 4, count)
    real = _grid_tables(on(prof.params, count), on(prof.batch, count), nodes, nodes * rng.integers(1, 5, count),
                        np.zeros(count))
    thr, total = real[:, 0].copy(), real[:, 1].copy()
    kind = np.arange(count) % 6
    thr[kind == 1] = np.round(thr[kind == 1], 1)  # many ties of throughput
    total[kind == 2] = np.sort(rng.choice([64.0, 128.0, 256.0], (int((kind == 2).sum()), points)), axis=1)  # repeats
    thr[kind == 3] *= rng.random(((kind == 3).sum(), points)) < 0.5  # points that cannot run
    thr[kind == 4] = 0.0  # no point runs
    total[kind == 5] = 512.0  # a fixed batch: one point, fifty times
    return thr, total


def test_envelope_candidates_hold_every_rows_first_best_grid_point():
    """A row valued on its envelope's candidates (models.envelope) gets what its whole grid gives
    it, bit for bit, the first of equal maxima included: at noise scales on the segments' starts,
    a hair either side of them, 0, huge and infinite. Nearly every row of a finite noise scale has
    few candidates, so the grid is not what answers them."""
    from schedlab.models.efficiency import grid_goodput, noise_scale
    from schedlab.models.envelope import NO_ENVELOPES

    rng = np.random.default_rng(11)
    thr, total = _adversarial_tables(rng, 60)
    env = NO_ENVELOPES.with_tables(np.arange(30, 60), thr[30:], total[30:]).with_tables(np.arange(30), thr[:30], total[:30])
    starts, table_of = env.keys.imag, env.keys.real.astype(int)
    scales = np.concatenate([starts, starts * (1 - 1e-15), starts * (1 + 1e-15), starts * 1.5, [0.0, 1e20, 1e20]])
    table = np.concatenate([table_of, table_of, table_of, table_of, rng.integers(0, len(thr), 3)])
    for sqr, init in ((1.0, 32.0), (0.01, 100.0), (0.0, 64.0)):  # sqr 0: infinite noise scale, efficiency 1
        grad = GradStats(np.full(len(table), sqr), scales * (sqr or 1.0) / init)  # phi = scales where sqr > 0
        phi = noise_scale(grad, np.full(len(table), init))
        points, wide = env.candidates(table, phi)
        good = grid_goodput(thr[table], total[table], GradStats(grad.sqr[:, None], grad.var[:, None]), init)
        best = np.argmax(good, axis=1)
        narrow = np.flatnonzero(~wide)
        at = good[narrow[:, None], points[narrow]]
        assert np.array_equal(points[narrow, np.argmax(at, axis=1)], best[narrow])
        assert np.array_equal(at.max(axis=1), good[narrow, best[narrow]])
        assert len(narrow) > 0.8 * len(table) if sqr else wide[grad.var > 0].all()  # infinite: the whole grid


def test_measured_lookup_returns_measured_rows_and_rotates_placements():
    table = measured_table("cifar10")
    row = table.placements[table.placements.placement == 22].iloc[0]
    assert table.step_sync_s((2, 2), row.local_bsz) == pytest.approx((row.step_time, row.sync_time))
    assert canonical_placement((0, 3, 1)) == (1, 3)
    assert canonical_placement((4, 1, 2)) == (1, 2, 4)
    step, sync = table.step_sync_s((4,) * 10, 64)  # unmeasured placement: from scalability.csv
    assert step > sync > 0


def test_shipped_profiles_follow_the_artifact():
    profiles = shipped_profiles()
    assert set(profiles) == {"bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3"}
    assert profiles["yolov3"].batch.max_local_bsz == 8
    # init/max batch: smallest/largest validation file; local range: placements.csv
    assert profiles["cifar10"].batch == BatchLimits(128, 4096, 32, 1024)
    assert profiles["bert"].max_epochs == 2 and profiles["imagenet"].max_epochs == 90


@pytest.mark.parametrize("app", APPLICATIONS)
def test_shipped_profiles_hold_what_the_tables_give(app):
    # profiles.json carries the tables' gradient statistics and batch limits, so a round reads
    # no table: they must be the tables' own.
    prof = shipped_profiles()[app]
    fields = table_fields(app)
    assert list(prof.grad_stats.__dict__.values()) == fields["grad_stats"]
    assert list(prof.batch.__dict__.values()) == fields["batch"]


def _scipy_minimize(fun, x0, bounds):
    """models.lbfgsb.minimize_bounded's contract through scipy's own wrapper."""
    from scipy.optimize import minimize

    res = minimize(fun, x0, jac=True, method="L-BFGS-B", bounds=bounds)
    return float(res.fun), res.x


@pytest.mark.parametrize("app", ["cifar10", "bert", "yolov3"])
def test_online_fits_take_scipys_minimize_steps_bit_for_bit(app, monkeypatch):
    # The fits' L-BFGS-B loop (models.lbfgsb) skips minimize's wrapper for speed; a replay's
    # results stay the same only if every iterate is the same double. Subsets of the measured
    # points, as an agent sees them (one node or several, one batch or many), restarts and a
    # warm start, where the first parameters hit their bounds.
    pts = measured_table(app).points()
    rng = np.random.default_rng(3)
    problems = []
    for size in (1, 2, 3, 5, 8, 13, 40):
        rows = pts.iloc[rng.choice(len(pts), size, replace=False)]
        problems.append([rows[c].to_numpy() for c in ("num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time")])

    def fits():
        out = []
        for n, r, m, step, sync in problems:
            first = fit_throughput_params(n, r, m, step, sync, rng=np.random.default_rng(0), restarts=2)
            out += [first, fit_throughput_params(n, r, m, step, sync, restarts=0, start=replace(first, gamma=1.5))]
        return out

    ours = fits()
    monkeypatch.setattr("schedlab.models.lbfgsb.minimize_bounded", _scipy_minimize)
    assert ours == fits()
