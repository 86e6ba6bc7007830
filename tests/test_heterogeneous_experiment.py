"""experiments/heterogeneous.py end to end on tiny inputs, and the per-type utilization it reports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import schedlab

SCRIPT = Path(__file__).parents[1] / "experiments" / "heterogeneous.py"


def test_the_script_writes_both_tables_and_ends_with_the_ratios(tmp_path):
    cli = subprocess.run([sys.executable, str(SCRIPT), "--traces", "23dbec", "--workloads", "workload-1", "--max-jobs",
                          "3", "--processes", "1", "--out", str(tmp_path), "--json"],
                         capture_output=True, text=True, check=True)
    last = json.loads(cli.stdout.strip().splitlines()[-1])
    gavel, pollux = last["mean_jct_s"]["gavel"], last["mean_jct_s"]["mixed_pollux"]
    assert list(gavel) == ["v100:9x4,p100:9x4,k80:9x4", "v100:2x4,p100:4x4,k80:6x4"]  # Gavel's simulated, physical
    assert list(pollux) == ["t4:6x4,v100:5x4,k80:5x4"]
    for cluster, jct in gavel.items():
        assert list(jct) == ["gavel_las_agnostic", "gavel_las", "sia", "joint", "tiresias", "fifo"]
        assert last["las_aware_vs_agnostic"][cluster] == pytest.approx(jct["gavel_las"] / jct["gavel_las_agnostic"], rel=1e-3)
    (jct,) = pollux.values()
    assert list(jct) == ["pollux", "sia", "joint"]
    assert last["sia_vs_pollux"] == pytest.approx(jct["sia"] / jct["pollux"], rel=1e-3)
    assert last["all_jobs_completed"]
    table = (tmp_path / "table.md").read_text()
    assert "utilization_k80" in table and "utilization_t4" in table.split("## Pollux")[1]
    assert "utilization_t4" not in table.split("## Pollux")[0]  # Gavel's clusters have no T4
    cells = pd.read_csv(tmp_path / "gavel.csv")
    assert set(cells.trace) == {"gavel/23dbec"} and {"utilization_v100", "utilization_p100", "utilization_k80"} <= set(cells)


def test_a_mixed_replay_reports_each_types_utilization_and_a_single_type_replay_does_not():
    mixed = schedlab.replay("workload-1", "sia", cluster="t4:1x4,k80:1x4", max_jobs=4)
    rounds, summary = mixed.rounds, mixed.summary
    assert (rounds.gpus_used_t4 + rounds.gpus_used_k80 == rounds.gpus_used).all()
    shares = summary["utilization_t4"] * 4 + summary["utilization_k80"] * 4
    assert 0 < summary["utilization_t4"] <= 1 and 0 <= summary["utilization_k80"] <= 1
    held_s = rounds.time_s.diff().shift(-1).fillna(0.0)
    assert shares == pytest.approx((rounds.gpus_used * held_s).sum() / (rounds.time_s.iloc[-1] - rounds.time_s.iloc[0]))
    plain = schedlab.replay("workload-1", "sia", num_nodes=2, max_jobs=4)
    assert not [k for k in plain.summary if k.startswith("utilization_")] and "gpus_used_t4" not in plain.rounds
