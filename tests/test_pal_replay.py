"""PAL's world: capacity every round, every job done, speed bounded by the fastest GPU, seeded,
and the artifact's semantics (iterations, the queue's cut, completion at a round's end)."""

from __future__ import annotations

import pandas as pd
import pytest

from schedlab.errors import ConfigError
from schedlab.replay.pal import ITERATION_S, PalConfig, pal_replay, work_s
from schedlab.traces import load_sia_philly


@pytest.fixture(scope="module")
def trace() -> pd.DataFrame:
    return load_sia_philly("workload-1").head(30)


@pytest.mark.parametrize("placement", ["packed_sticky", "pal", "pm_first", "random"])
def test_capacity_completion_and_speed_bounds(trace, placement):
    config = PalConfig(num_nodes=4, gpus_per_node=4)
    result = pal_replay(trace, placement, config)
    assert (result.rounds.gpus_used <= 16).all()
    assert result.summary["jobs_completed"] == len(trace)
    fastest = 0.9  # no measured GPU is more than 10 % faster than the median one
    work = [work_s(m, d, "iterations") for m, d in zip(result.jobs.model, result.jobs.duration)]
    assert (result.jobs.jct_s >= pd.Series(work, index=result.jobs.index) * fastest).all()


def test_same_seed_same_result_and_the_seed_matters(trace):
    def jct(seed: int) -> list[float]:
        return pal_replay(trace, "random", PalConfig(num_nodes=4, gpus_per_node=4, seed=seed)).jobs.jct_s.tolist()

    assert jct(1) == jct(1)
    assert jct(1) != jct(2)


def test_bad_settings_are_named(trace):
    with pytest.raises(ConfigError, match="order"):
        PalConfig(order="sjf")
    with pytest.raises(ConfigError, match="unknown placement 'best'"):
        pal_replay(trace, "best", PalConfig())
    with pytest.raises(ConfigError, match="needs .* GPUs, the cluster has 4"):
        pal_replay(trace, "pal", PalConfig(num_nodes=1, gpus_per_node=4))
    with pytest.raises(ConfigError, match="work 'epochs'"):
        PalConfig(work="epochs")
    with pytest.raises(ConfigError, match="slowdowns 'raw'"):
        PalConfig(slowdowns="raw")
    odd = pd.DataFrame({"job_id": [0], "num_gpus": [1], "submit_time": [0], "duration": [10], "model": ["lstm"]})
    with pytest.raises(ConfigError, match="model 'lstm' has no iteration time.*work='seconds'"):
        pal_replay(odd, "pal", PalConfig(num_nodes=1))


def lone(model: str, duration: float) -> pd.DataFrame:
    return pd.DataFrame({"job_id": [0], "num_gpus": [1], "submit_time": [0], "duration": [duration], "model": [model]})


def test_duration_counts_iterations_and_a_job_ends_with_its_round():
    config = PalConfig(num_nodes=1)
    jct = pal_replay(lone("vgg19", 10_000), "pal", config).jobs.jct_s.iloc[0]
    work = 10_000 * ITERATION_S["vgg19"]  # 3,006 s, not 10,000
    assert jct % config.round_s == 0
    assert work * 0.9 <= jct <= work * 1.3 + config.round_s
    seconds = pal_replay(lone("vgg19", 10_000), "pal", PalConfig(num_nodes=1, work="seconds")).jobs.jct_s.iloc[0]
    assert seconds >= 10_000 * 0.9


def test_the_queue_stops_at_the_first_job_that_does_not_fit_unless_backfilled():
    # One node of 4: a 3-GPU job runs, a 2-GPU job does not fit, and the 1-GPU job behind it
    # waits (PAL's cut) or runs beside the first (backfill).
    trace = pd.DataFrame({"job_id": [0, 1, 2], "num_gpus": [3, 2, 1], "submit_time": [0, 1, 2],
                          "duration": [20_000, 1_000, 1_000], "model": ["vgg19"] * 3})
    cut = pal_replay(trace, "packed_sticky", PalConfig(num_nodes=1)).jobs.set_index("job_id").jct_s
    backfilled = pal_replay(trace, "packed_sticky", PalConfig(num_nodes=1, backfill=True)).jobs.set_index("job_id").jct_s
    round_s = PalConfig().round_s
    assert backfilled[2] < 2 * round_s  # done in the round after it arrived
    assert cut[2] > 10 * round_s  # behind the 3-GPU job's ~6,000 s
