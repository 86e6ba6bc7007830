"""Replay: the simulated world, the engine's invariants, the baselines, and a regression."""

from __future__ import annotations

import gc
import json
import math
import subprocess
import sys
import weakref

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedlab.errors import ConfigError
from schedlab.models.efficiency import best_batch
from schedlab.policies import POLICIES, make_policy
from schedlab.sim.engine import replay
from schedlab.sim.jobs import JobAgent, JobState, TraceJob, advance, isolated_time_s, reallocate
from schedlab.sim.truth import application_truth
from schedlab.sim.world import WORLDS, ReplayConfig
from schedlab.state import GpuRef, GradStats
from schedlab.traces import (
    load_philly,
    load_sia_philly,
    load_workload,
    philly_trace_workload,
    philly_workload,
    shipped_workloads,
    synthetic_workload,
    trace_jobs,
)

SMALL_MIX = {"cifar10": 1, "ncf": 1}


@pytest.fixture(scope="module")
def small_jobs():
    """14 short jobs arriving within ~20 minutes: a loaded 4 x 4 cluster for a few dozen rounds."""
    return trace_jobs(synthetic_workload(14, 40.0, np.random.default_rng(3), mix=SMALL_MIX))


SMALL = WORLDS["pollux"].with_options(num_nodes=4, gpus_per_node=4)


@pytest.fixture(scope="module")
def small_results(small_jobs):
    return {name: replay(small_jobs, make_policy(name), SMALL) for name in POLICIES}


def test_artifact_requests_are_the_configurations_we_derive():
    # Every (replicas, batch) request of the 8 shipped workloads is one our truth model offers,
    # i.e. we read the measured tables as the artifact's workload generator did.
    for path in shipped_workloads().values():
        for row in load_workload(path).itertuples():
            assert (row.num_replicas, row.batch_size) in application_truth(row.application).configurations()


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_every_job_completes_and_capacity_holds(small_results, policy):
    res = small_results[policy]
    assert res.summary["jobs_completed"] == 14
    assert (res.rounds.gpus_used <= SMALL.total_gpus).all()
    assert res.summary["fallback_rounds"] == 0


@pytest.mark.parametrize("policy", ["tiresias", "fifo"])
def test_jct_at_least_the_isolated_best_case(small_results, small_jobs, policy):
    # Gang-scheduled jobs run at their requested GPUs: nothing beats that count on an empty
    # cluster in its fastest placement, plus one restart delay.
    jobs = small_results[policy].jobs.set_index("name")
    for job in small_jobs:
        truth = application_truth(job.application)
        placements = {tuple(sorted(p)) for p in _partitions(job.num_replicas, SMALL.cluster.gpus_per_node)
                      if len(p) <= SMALL.cluster.num_nodes}
        best = min(isolated_time_s(truth, p, job.batch_size) for p in placements)
        assert jobs.loc[job.name, "jct_s"] >= best + SMALL.restart_delay_s - 1e-6


def _partitions(n: int, max_part: int):
    if n == 0:
        yield ()
        return
    for first in range(min(n, max_part), 0, -1):
        for rest in _partitions(n - first, first):
            yield (first, *rest)


def test_replay_is_deterministic(small_jobs, small_results):
    again = replay(small_jobs, make_policy("pollux"), SMALL)
    pd.testing.assert_frame_equal(again.jobs, small_results["pollux"].jobs)


def test_a_replay_keeps_its_set_up_out_of_the_collectors_passes_and_leaves_the_process_as_it_was(small_jobs):
    # Its jobs, states and agents are frozen (gc.freeze) while its rounds run, unfrozen after; a
    # process that froze objects of its own keeps those frozen (as many as are still alive).
    frozen = []

    def count(now_s, done):
        frozen.append(gc.get_freeze_count())

    replay(small_jobs, make_policy("pollux"), SMALL, on_round=count)
    assert min(frozen) > 0 and gc.get_freeze_count() == 0
    gc.freeze()
    try:
        mine = gc.get_freeze_count()
        frozen.clear()
        replay(small_jobs, make_policy("pollux"), SMALL, on_round=count)
        assert max(frozen) <= mine and 0 < gc.get_freeze_count() <= mine  # none added, theirs not unfrozen
    finally:
        gc.unfreeze()


def test_a_joint_replay_depends_on_its_inputs_alone():
    # 12 jobs of workload-1 on PAL's measured GPUs and racks: ten of the 89 rounds need a MIP
    # beyond the LP, where the portfolio's race stopped at whichever optimum was found first
    jobs = trace_jobs(load_workload("workload-1"))[:12]
    world = WORLDS["variability"].with_options(horizon_s=5400.0)
    first, again = (replay(jobs, make_policy("joint"), world) for _ in range(2))
    pd.testing.assert_frame_equal(again.jobs, first.jobs)
    pd.testing.assert_series_equal(again.rounds.objective, first.rounds.objective)


def test_short_workload_regression(small_results):
    # Mean JCTs recorded when the replay was validated against the artifact (see README);
    # a change here means the simulated world or a policy changed: check before updating.
    # No job opts in to freezing here, so the freezing policies are pollux; nor has the world
    # variability or racks, so joint is pollux too. The placement policies gang-schedule jobs at
    # their requests behind PAL's FIFO cut; milp moves jobs between equally good placements.
    # Gavel's policies time-share GPUs round by round (over 100 restarts here, at 60 s rounds and
    # the world's restart delay); on one GPU type the aware and agnostic LAS are the same.
    expected = {"pollux": 707.0, "sia": 840.6, "tiresias": 865.8, "optimus": 994.8, "fifo": 1352.2, "ones": 725.4,
                "icefrog": 707.0, "static_freeze": 707.0, "joint": 707.0, "pal": 1346.7, "pm_first": 1376.2,
                "packed_sticky": 1343.8, "packed_nonsticky": 1348.1, "random": 2681.3, "milp": 1459.4,
                "milp_cpsat": 1396.8, "gavel_las": 1978.1, "gavel_las_agnostic": 1978.1, "gavel_makespan": 2250.2,
                "gavel_ftf": 1922.4}
    got = {k: round(v.summary["mean_jct_s"], 1) for k, v in small_results.items()}
    assert got == pytest.approx(expected, rel=0.02), got


def test_goodput_policies_beat_gang_scheduling_on_a_loaded_cluster(small_results):
    mean = {k: v.summary["mean_jct_s"] for k, v in small_results.items()}
    assert mean["pollux"] < mean["tiresias"] and mean["pollux"] < mean["fifo"]


@settings(max_examples=15, deadline=None)
@given(moves=st.lists(st.tuples(st.integers(0, 8), st.floats(1.0, 300.0)), min_size=1, max_size=8))
def test_progress_never_decreases(moves):
    truth = application_truth("cifar10")
    agent = JobAgent(truth, adaptive=True)
    state, now = JobState(TraceJob("j", "cifar10", 0.0, 2, 2048)), 0.0
    for gpus, seconds in moves:
        refs = tuple(GpuRef(f"n{k // 4}", k % 4) for k in range(gpus))
        if set(refs) != set(state.gpus):
            state = reallocate(state, agent, refs, None, 30.0)
        after = advance(state, truth, agent, None, now, seconds)
        assert after.progress >= state.progress and after.epoch >= state.epoch
        assert after.attained_gpu_s >= state.attained_gpu_s
        assert after.attained_gpu_s - state.attained_gpu_s <= gpus * seconds + 1e-6
        state, now = after, now + seconds


@settings(max_examples=30, deadline=None)
@given(nodes=st.integers(1, 4), per_node=st.integers(1, 4), epoch=st.integers(0, 60), bsz_scale=st.floats(1.0, 8.0))
def test_a_replayed_jobs_batch_is_the_best_batch_of_its_own_model(nodes, per_node, epoch, bsz_scale):
    """The replay values a shape's batch grid once per fitted model (the throughput part) and
    each epoch's gradient statistics against it: the same choice as models.efficiency.best_batch."""
    truth = application_truth("imagenet")
    agent = JobAgent(truth, adaptive=True)
    for n, r, m in ((1, 1, 32), (1, 2, 64), (2, 8, 128), (1, 4, 100)):
        agent.observe(n, r, m, *truth.step_sync_s((r // n,) * n, m))
    params = agent.params
    grad = truth.grad_stats(truth.init_bsz * bsz_scale, epoch)
    r = nodes * per_node
    expected = best_batch(params, grad, truth.limits, nodes, r)
    split = agent.choose_split(nodes, r, grad, None)
    assert (split.local_bsz, split.accum_steps) == (int(expected.local_bsz[0]), int(expected.accum_steps[0]))


def test_a_remembered_batch_holds_its_statistics_so_new_ones_are_never_taken_for_them():
    """A job's batch is remembered by the identity of its model and statistics: the memory holds
    those objects, so a new object never gets a dead one's id (and its answer); one with the
    same values but another identity gets the same batch, computed afresh."""
    truth = application_truth("cifar10")
    agent = JobAgent(truth, adaptive=True)
    agent.observe(1, 1, 64, *truth.step_sync_s((1,), 64))
    agent.observe(1, 4, 64, *truth.step_sync_s((4,), 64))
    measured = truth.grad_stats(truth.init_bsz * 3.0, 7)
    grad = GradStats(measured.sqr, measured.var)  # an object only this test holds
    held = weakref.ref(grad)
    split = agent.choose_split(1, 4, grad, None)
    del grad
    gc.collect()
    assert held() is not None
    assert agent.choose_split(1, 4, GradStats(measured.sqr, measured.var), None) == split

def test_a_job_finishing_mid_round_gets_its_exact_completion_time():
    truth = application_truth("ncf")
    state = JobState(TraceJob("n", "ncf", 0.0, 1, 32768))
    agent = JobAgent(truth, adaptive=False)
    state = reallocate(state, agent, (GpuRef("n0", 0),), 32768, 30.0)
    done = advance(state, truth, agent, 32768, 0.0, 3600.0)
    assert done.done
    assert done.completion_s == pytest.approx(30.0 + isolated_time_s(truth, (1,), 32768))


def test_tiresias_gang_schedules_and_demotes():
    jobs = (TraceJob("big", "cifar10", 0.0, 12, 2048), TraceJob("a", "cifar10", 10.0, 6, 2048),
            TraceJob("b", "ncf", 20.0, 1, 32768))
    res = replay(jobs, make_policy("tiresias"), SMALL)
    first = res.rounds.iloc[0]
    # 12 + 1 GPUs: "a" (6) does not fit behind "big" but "b" (1) does
    assert first.running_jobs == 2 and first.gpus_used == 13


def test_unknown_policy_and_bad_config_name_the_fix():
    with pytest.raises(ConfigError, match="use one of"):
        make_policy("nope")
    with pytest.raises(ConfigError, match="round_s must be > 0"):
        replay((TraceJob("a", "ncf", 0.0, 1, 32768),), make_policy("fifo"), ReplayConfig(round_s=0))


def test_workload_errors_name_the_column(tmp_path):
    bad = tmp_path / "w.csv"
    bad.write_text("name,time,application,num_replicas\nx,0,cifar10,2\n")
    with pytest.raises(ConfigError, match="missing column.*batch_size"):
        load_workload(bad)
    bad.write_text("name,time,application,num_replicas,batch_size\nx,0,resnet,2,64\n")
    with pytest.raises(ConfigError, match="application.*resnet.*unknown"):
        load_workload(bad)
    with pytest.raises(ConfigError, match="does not exist"):
        load_workload(tmp_path / "missing.csv")


def test_philly_sampling_is_seeded_and_maps_by_gpu_time():
    a = philly_workload(50, np.random.default_rng(7))
    b = philly_workload(50, np.random.default_rng(7))
    pd.testing.assert_frame_equal(a, b)
    assert len(a) == 50 and a.time.is_monotonic_increasing and a.time.max() < 8 * 3600
    assert set(a.application) <= {"cifar10", "ncf", "deepspeech2", "bert", "yolov3", "imagenet"}


def test_philly_trace_keeps_real_timestamps_in_any_window():
    trace = load_philly()
    first = trace.timestamp.min()
    window = philly_trace_workload(np.random.default_rng(0), start_day=30, days=2, philly=trace)
    in_window = trace[(trace.timestamp >= first + pd.Timedelta(days=30)) & (trace.timestamp < first + pd.Timedelta(days=32))]
    assert len(window) == len(in_window) > 100
    expected = np.sort((in_window.timestamp - first - pd.Timedelta(days=30)).dt.total_seconds().to_numpy())
    np.testing.assert_allclose(window.time.to_numpy(), expected)  # real gaps, not folded into a day
    whole = philly_trace_workload(np.random.default_rng(0), philly=trace)
    assert len(whole) == len(trace) and whole.time.max() / 86400 > 108
    with pytest.raises(ConfigError, match="no Philly job"):
        philly_trace_workload(np.random.default_rng(0), start_day=200, philly=trace)


def test_replay_of_a_trace_window_runs_from_the_cli():
    out = subprocess.run([sys.executable, "-m", "schedlab.cli", "replay", "--trace", "philly", "--start-day", "40",
                          "--days", "0.1", "--nodes", "16", "--policy", "tiresias", "--quiet", "--json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert summary["jobs_total"] > 5 and summary["jobs_completed"] == summary["jobs_total"]


def test_synthetic_workload_follows_rate_and_mix():
    w = synthetic_workload(400, 20.0, np.random.default_rng(0), mix={"ncf": 3, "bert": 1})
    assert set(w.application) == {"ncf", "bert"}
    assert 0.65 < (w.application == "ncf").mean() < 0.85
    assert w.time.max() / 3600 == pytest.approx(20.0, rel=0.15)


def test_sia_philly_traces_load():
    df = load_sia_philly("workload-1")
    assert len(df) == 160 and list(df.columns[:5]) == ["job_id", "num_gpus", "submit_time", "duration", "model"]


def test_cli_replay_json(tmp_path):
    path = tmp_path / "w.csv"
    synthetic_workload(4, 60.0, np.random.default_rng(1), mix={"ncf": 1}).to_csv(path, index=False)
    out = subprocess.run([sys.executable, "-m", "schedlab.cli", "replay", "--workload", str(path), "--policy", "pollux",
                          "--nodes", "2", "--json", "--quiet", "--out", str(tmp_path / "out")],
                         capture_output=True, text=True, check=True)
    summary = json.loads(out.stdout)
    for key in ("mean_jct_s", "p99_jct_s", "makespan_s", "utilization", "solve_p50_ms", "jobs_completed"):
        assert key in summary and not (isinstance(summary[key], float) and math.isnan(summary[key]))
    assert summary["jobs_completed"] == 4
    assert (tmp_path / "out" / "jobs.csv").exists() and (tmp_path / "out" / "rounds.csv").exists()



def test_a_world_with_variability_and_racks_slows_jobs_on_slow_gpus(small_jobs):
    world = WORLDS["variability"].with_options(num_nodes=4, gpus_per_node=4, racks=2)
    plain = replay(small_jobs, make_policy("pollux"), SMALL).summary
    for name in ("pollux", "joint", "pollux+pal", "tiresias+pal"):
        res = replay(small_jobs, make_policy(name), world)
        assert res.summary["jobs_completed"] == 14 and (res.rounds.gpus_used <= 16).all()
    # the world changes what jobs feel: each GPU at a measured GPU's slowest run, a slow uplink
    assert replay(small_jobs, make_policy("pollux"), world).summary["mean_jct_s"] != plain["mean_jct_s"]


@pytest.mark.parametrize("policy", ["tiresias", "fifo", "pal"])
def test_a_job_that_can_never_fit_stops_the_replay_with_a_clear_error(policy):
    jobs = (TraceJob("big", "cifar10", 0.0, 8, 2048), TraceJob("small", "ncf", 0.0, 1, 32768))
    with pytest.raises(ConfigError, match=r"\(4 GPUs\) sat idle for 3 rounds .* big, asks for 8 GPUs"):
        replay(jobs, make_policy(policy), ReplayConfig().with_options(num_nodes=1, gpus_per_node=4))


def test_replay_outputs_quote_names_a_spreadsheet_would_run(tmp_path):
    from schedlab.sim.engine import write_outputs

    jobs = (TraceJob("=HYPERLINK(\"http://x\")", "ncf", 0.0, 1, 32768), TraceJob("-2+3", "ncf", 0.0, 1, 32768))
    write_outputs(replay(jobs, make_policy("fifo"), SMALL), tmp_path)
    names = pd.read_csv(tmp_path / "jobs.csv")["name"].tolist()
    assert names == ["'=HYPERLINK(\"http://x\")", "'-2+3"]


def test_replay_out_is_checked_before_the_replay_runs(tmp_path):
    blocker = tmp_path / "taken"
    blocker.write_text("a file")
    out = subprocess.run([sys.executable, "-m", "schedlab.cli", "replay", "--workload", "workload-6",
                          "--policy", "pollux", "--out", str(blocker / "sub"), "--quiet"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "cannot create it" in out.stderr and "Traceback" not in out.stderr
