"""PAL's world: capacity every round, every job done, speed bounded by the fastest GPU, seeded."""

from __future__ import annotations

import pandas as pd
import pytest

from schedlab.errors import ConfigError
from schedlab.replay.pal import PalConfig, pal_replay
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
    assert (result.jobs.jct_s >= result.jobs.duration * fastest).all()


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
