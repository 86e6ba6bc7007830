"""Clusters of several GPU types: the specs users write, mixed random rounds, mixed Pollux worlds."""

from __future__ import annotations

import json

import numpy as np
import pytest

import schedlab
from schedlab.bench import random_round
from schedlab.bench.rounds import mixed_pools
from schedlab.cli import main
from schedlab.clusters import ClusterSpec, NodePool, as_pools, make_cluster, parse_pools, pools_text
from schedlab.errors import ConfigError
from schedlab.models.profiles import shipped_profiles
from schedlab.models.type_speeds import speed_ratio
from schedlab.sim.jobs import TraceJob
from schedlab.sim.world import WORLDS
from schedlab.sweep import parse_sweep
from schedlab.sweep.run import cell_config

THREE = "t4:2x4,v100:2x4,k80:2x4"


def test_pools_are_read_from_type_nodes_x_gpus_and_from_gavels_counts():
    assert parse_pools("V100:9x4, p100:9x4,k80:9x4") == (NodePool("v100", 9, 4), NodePool("p100", 9, 4),
                                                        NodePool("k80", 9, 4))
    # Gavel's V100:P100:K80 GPU counts, one GPU per server as its driver's default; a type of 0 is left out
    assert parse_pools("36:0:12") == (NodePool("v100", 36, 1), NodePool("k80", 12, 1))
    assert pools_text(parse_pools("36:36:36")) == "v100:36x1,p100:36x1,k80:36x1"
    assert as_pools([{"gpu_type": "T4", "num_nodes": 2, "gpus_per_node": 8}]) == (NodePool("t4", 2, 8),)


@pytest.mark.parametrize("text", ["v100:9", "v100:0x4", "9x4", "36:36", "0:0:0", "v100:9x4;k80:1x4"])
def test_an_unreadable_cluster_names_the_flag_and_both_forms(text):
    with pytest.raises(ConfigError, match=r"--cluster .*(v100:9x4|1 node)"):
        parse_pools(text)


def test_racks_and_variability_apply_over_every_pool():
    spec = ClusterSpec(racks=3, variability="centroids", pools=parse_pools(THREE))
    seen, truth = make_cluster(spec)
    assert [n.gpu_type for n in seen.nodes] == ["t4", "t4", "v100", "v100", "k80", "k80"]
    assert sum(len(r.nodes) for r in seen.topology.racks) == 6 and len(seen.topology.racks) == 3
    assert all(n.slowdown for n in truth.nodes)


def test_a_mixed_random_round_gives_every_job_its_profile_projected_on_every_type():
    pools = parse_pools("v100:3x4,p100:2x8,k80:3x2")
    ri = random_round(np.random.default_rng(5), 0, 60, pools=pools)
    assert sum(n.gpus for n in ri.cluster.nodes) == 34
    type_of = {n.id: n.gpu_type for n in ri.cluster.nodes}
    for job in ri.jobs:
        base = shipped_profiles()[job.application].params
        assert set(job.throughput) == {"v100", "p100", "k80"}
        for gpu_type, params in job.throughput.items():
            assert params.alpha_c == pytest.approx(base.alpha_c / speed_ratio(job.application, gpu_type))
            assert params.alpha_n == base.alpha_n
        assert len({type_of[g.node] for g in job.current_gpus}) <= 1
    assert any(job.current_gpus for job in ri.jobs)
    result = schedlab.solve_round(ri)
    assert result.status == "optimal"
    assert all(len({type_of[g.node] for g in a.gpus}) == 1 for a in result.allocations if a.gpus)


def test_a_size_splits_over_types_by_whole_nodes():
    pools = mixed_pools(2048, ("v100", "p100", "k80"))
    assert [p.num_nodes for p in pools] == [171, 171, 170] and sum(p.num_nodes * 4 for p in pools) == 2048


def test_bench_times_a_mixed_round_and_names_its_cluster(capsys):
    assert main(["bench", "--cluster", "v100:2x4,k80:2x4", "--jobs", "10", "--rounds", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["cluster"] == "v100:2x4,k80:2x4" and out["gpus"] == 16 and out["status_counts"] == {"optimal": 2}


@pytest.mark.parametrize("argv, message", [
    (["bench", "--cluster", "v100:2x4", "--gpus", "8"], "--gpus and --cluster"),
    (["bench", "--cluster", "a100:2x4"], "no speed ratio for GPU type 'a100'"),
    (["bench", "--types", "v100,k80"], "--types goes with --scale"),
    (["replay", "--workload", "workload-6", "--policy", "sia", "--cluster", "t4:2x4", "--nodes", "3"], "drop --nodes"),
    (["replay", "--workload", "workload-6", "--policy", "sia", "--cluster", "a100:2x4"], "GPU type 'a100'"),
])
def test_the_cli_refuses_a_cluster_it_cannot_run_and_says_why(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_a_pollux_world_takes_types_derived_from_the_t4_and_refuses_others():
    config = WORLDS["pollux"].with_options(pools=parse_pools(THREE))
    assert config.total_gpus == 24 and config.cluster.gpu_types == ("t4", "v100", "k80")
    with pytest.raises(ConfigError, match="'a100' has no true throughput"):
        WORLDS["pollux"].with_options(pools=parse_pools("t4:2x4,a100:2x4"))
    with pytest.raises(ConfigError, match="num_nodes 3: the cluster is node pools"):
        config.with_options(num_nodes=3)


def _alone(cluster: str, policy: str = "sia") -> float:
    job = schedlab.replay(_one_job(), policy, cluster=cluster, restart_delay_s=0.0)
    return float(job.jobs.jct_s.iloc[0])


def _one_job():
    import pandas as pd

    return pd.DataFrame({"name": ["j"], "time": [0.0], "application": ["imagenet"], "num_replicas": [1],
                         "batch_size": [200]})


def test_a_job_runs_at_its_applications_speed_on_each_type():
    t4, v100, k80 = (_alone(c) for c in ("t4:1x4", "v100:1x4", "k80:1x4"))
    assert v100 < t4 < k80  # imagenet: 1.5x a T4 on a V100, 0.24x on a K80 (models.type_speeds)


def test_sia_sees_each_type_as_it_runs_and_pollux_sees_one_model_on_every_type():
    seen: dict[str, list] = {}

    class Spy:
        def __init__(self, name: str):
            self.inner = schedlab.policies.make_policy(name)
            self.name, self.batch_mode, self.throughput_model = name, self.inner.batch_mode, "oracle"
            self.type_blind = self.inner.type_blind

        def schedule(self, ri):
            seen.setdefault(self.name, []).append(ri.jobs[0].throughput)
            return self.inner.schedule(ri)

    for name in ("sia", "pollux"):
        schedlab.replay(_one_job(), Spy(name), cluster="t4:1x4,k80:1x4")
    sia, pollux = seen["sia"][0], seen["pollux"][0]
    assert sia["k80"].beta_c == pytest.approx(sia["t4"].beta_c / speed_ratio("imagenet", "k80"))
    assert pollux["k80"] == pollux["t4"]


def test_a_sweep_runs_its_cells_on_each_cluster_of_its_grid():
    text = """
[traces]
workloads = ["workload-6"]
max_jobs = 4
[grid]
policies = ["sia"]
cluster = ["T4:2x4,v100:1x4", [{gpu_type = "t4", num_nodes = 3, gpus_per_node = 4}]]
"""
    sweep = parse_sweep(text)
    assert [c["cluster"] for c in sweep.cells] == ["t4:2x4,v100:1x4", "t4:3x4"]
    assert "nodes" not in sweep.cells[0]
    assert cell_config(sweep.cells[0]).cluster.pools == parse_pools("t4:2x4,v100:1x4")
    with pytest.raises(ConfigError, match="grid.nodes and grid.cluster"):
        parse_sweep(text.replace("[grid]", "[grid]\nnodes = [4]"))
    with pytest.raises(ConfigError, match="line 7: .*'a100'"):
        parse_sweep(text.replace("v100:1x4", "a100:1x4"))


def test_a_single_type_world_keeps_its_jobs_answers():
    plain = schedlab.replay("workload-6", "sia", max_jobs=6, num_nodes=2)
    pooled = schedlab.replay("workload-6", "sia", max_jobs=6, cluster="t4:2x4")
    timing = {"solve_p50_ms", "solve_p95_ms", "solve_max_ms"}
    assert {k: v for k, v in plain.summary.items() if k not in timing} == {
        k: v for k, v in pooled.summary.items() if k not in timing}
    assert plain.jobs.equals(pooled.jobs)


def test_a_trace_job_of_fixed_work_runs_at_its_types_speed():
    from schedlab.sim.engine import _world
    from schedlab.sim.jobs import JobState
    from schedlab.sim.kinds import work_speed
    from schedlab.sim.truth import application_truth
    from schedlab.state import GpuRef

    world = _world(ClusterSpec(pools=parse_pools("t4:1x4,k80:1x4")))
    job = TraceJob("j", "cifar10", 0.0, 1, 128, work_s=100.0)
    speeds = [work_speed(JobState(job, gpus=(GpuRef(node, 0),)), application_truth("cifar10"), world, 4)
              for node in ("n0", "n1")]
    assert speeds == pytest.approx([1.0, speed_ratio("cifar10", "k80")])


def test_recorded_rounds_are_those_a_type_aware_policy_sees_on_a_mixed_cluster():
    import io

    from schedlab.workbench import recorder

    sink = io.StringIO()
    schedlab.replay(_one_job(), recorder(schedlab.policies.make_policy("sia"), sink, 2), cluster="t4:1x4,k80:1x4")
    first = json.loads(sink.getvalue().splitlines()[0])
    assert {n["gpu_type"] for n in first["cluster"]["nodes"]} == {"t4", "k80"}
    params = first["jobs"][0]["throughput_params"]
    assert params["k80"]["alpha_c"] == pytest.approx(params["t4"]["alpha_c"] / speed_ratio("imagenet", "k80"))


def test_the_mixed_pollux_config_replays_each_workload_under_each_policy_on_one_mixed_cluster():
    from pathlib import Path

    from schedlab.sweep import load_sweep

    sweep = load_sweep(Path(__file__).parents[1] / "experiments" / "configs" / "mixed_pollux.toml")
    assert len(sweep.cells) == 8 * 3 and {c["cluster"] for c in sweep.cells} == {"t4:6x4,v100:5x4,k80:5x4"}
    assert cell_config(sweep.cells[0]).cluster.gpu_types == ("t4", "v100", "k80")
