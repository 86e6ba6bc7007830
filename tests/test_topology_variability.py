"""Topology locality follows the graph; variability classes follow PAL's recipe (k by silhouette)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from schedlab import topology
from schedlab.clusters import ClusterSpec, make_cluster
from schedlab.errors import ConfigError
from schedlab.models import variability
from schedlab.models.variability import (
    assign_slowdowns,
    classify,
    measured_classes,
    ready_32gpu,
    sample_measured,
    silhouette_of_distinct,
    tiered,
)


def _graph(spec: ClusterSpec):
    """The graph of a simulated cluster as a scheduler sees it (node ids n0, n1, ...)."""
    return topology.cluster_graph(make_cluster(spec)[0])


@pytest.fixture
def cluster():
    return _graph(ClusterSpec(8, 4, racks=2))


def test_locality_cost_rises_as_a_gpu_moves_off_node_then_off_rack(cluster):
    same_node = ["gpu:n0/0", "gpu:n0/1"]
    other_node = ["gpu:n0/0", "gpu:n1/1"]
    other_rack = ["gpu:n0/0", "gpu:n5/1"]
    a, b, c = (topology.locality(cluster, s) for s in (same_node, other_node, other_rack))
    assert (a.nodes, a.racks) == (1, 1) and (b.nodes, b.racks) == (2, 1) and (c.nodes, c.racks) == (2, 2)
    assert a.bottleneck_gbps > b.bottleneck_gbps


def test_slower_links_in_the_graph_lower_the_bottleneck():
    fast = _graph(ClusterSpec(4, 2, racks=2, uplink_gbps=400.0, node_gbps=200.0))
    slow = _graph(ClusterSpec(4, 2, racks=2, uplink_gbps=400.0, node_gbps=25.0))
    pair = ["gpu:n0/0", "gpu:n3/0"]
    assert topology.locality(slow, pair).bottleneck_gbps == 25.0 < topology.locality(fast, pair).bottleneck_gbps


def test_topology_round_trips_through_node_link_json(cluster, tmp_path):
    topology.save(cluster, tmp_path / "c.json")
    back = topology.load(tmp_path / "c.json")
    assert sorted(topology.gpus(back)) == sorted(topology.gpus(cluster))
    assert topology.locality(back, ["gpu:n0/0", "gpu:n5/1"]) == topology.locality(cluster, ["gpu:n0/0", "gpu:n5/1"])


def test_unknown_gpu_is_named(cluster):
    with pytest.raises(ConfigError, match="gpu:n9/0"):
        topology.locality(cluster, ["gpu:n0/0", "gpu:n9/0"])


def test_kmeans_picks_k_by_silhouette_and_outliers_get_their_own_class():
    rng = np.random.default_rng(0)
    values = np.concatenate([rng.normal(100, 0.5, 40), rng.normal(110, 0.5, 40), rng.normal(120, 0.5, 40), [300.0]])
    cv = classify(pd.Series(values, index=[f"g{i}" for i in range(len(values))]))
    assert cv.k == 3 and cv.outliers == 1
    sf = cv.slowdown
    assert sf["g0"] == pytest.approx(100 / 110, rel=0.01)  # centroid over the median centroid
    assert sf["g120"] == pytest.approx(300 / 110, rel=0.01)
    assert len(set(sf.round(6))) == 4


def test_a_cluster_of_a_few_gpus_is_tiered_each_value_its_own_tier():
    # k-means needs more distinct values than K_RANGE's least k; a 2-GPU cluster raised ConfigError
    cv = classify(pd.Series([1.0, 1.3, 1.3], index=["a", "b", "c"]))
    assert cv.k == 2 and cv.slowdown.to_dict() == pytest.approx({"a": 1.0 / 1.15, "b": 1.3 / 1.15, "c": 1.3 / 1.15})
    cluster = make_cluster(ClusterSpec(num_nodes=1, gpus_per_node=2, variability="measured", seed=3))[0]
    for factors in cluster.nodes[0].slowdown.values():
        assert len(set(factors)) == 2  # two GPUs, two tiers


def test_the_silhouette_over_distinct_values_is_scikit_learns():
    # A simulated cluster's GPUs draw from a few hundred measured ones: many equal values, some
    # clusters of one. The distinct-value sums must give scikit-learn's pairwise score.
    from sklearn.cluster import KMeans
    from sklearn.metrics import silhouette_score

    rng = np.random.default_rng(4)
    for size, distinct in ((400, 30), (1500, 250), (60, 60)):
        values = np.append(rng.choice(rng.gamma(2.0, 1.0, distinct), size=size), 40.0)  # 40: a cluster of one
        for k in (2, 4, 7):
            labels = KMeans(n_clusters=k, n_init=3, random_state=0).fit(values.reshape(-1, 1)).labels_
            assert silhouette_of_distinct(values, labels) == pytest.approx(silhouette_score(values.reshape(-1, 1), labels),
                                                                           abs=1e-12)


def test_tiers_of_a_large_cluster_are_those_the_pairwise_silhouette_gives(monkeypatch):
    values = pd.Series(np.random.default_rng(6).choice(measured_classes()["classA"].gpu_perf.to_numpy(), size=1200))
    pairwise = classify(values)
    monkeypatch.setattr(variability, "SILHOUETTE_PAIRWISE_MAX", 100)  # as a cluster of 65,536 GPUs is tiered
    by_distinct = classify(values)
    assert by_distinct.k == pairwise.k and (by_distinct.labels == pairwise.labels).all()


def test_measured_classes_are_not_stuck_at_two_clusters():
    # PAL's artifact always returns k = 2; the silhouette picks more for ResNet and BERT.
    classes = measured_classes()
    assert classes["classA"].k > 2 and classes["classB"].k > 2
    for cv in classes.values():
        assert np.median(cv.slowdown) == pytest.approx(1.0, abs=0.02)


def test_assigning_measured_gpus_is_seeded(cluster):
    ids = topology.gpus(cluster)
    a = assign_slowdowns(ids, np.random.default_rng(5))
    b = assign_slowdowns(ids, np.random.default_rng(5))
    c = assign_slowdowns(ids, np.random.default_rng(6))
    assert a == b and a != c
    assert set(a[ids[0]]) == {"classA", "classB", "classC", "classD"}


def test_ready_table_covers_an_8x4_cluster():
    df = ready_32gpu()
    assert len(df) == 32 and df.node.nunique() == 8 and (df.classA > 0).all()


def test_pal_world_gpus_run_at_measured_values_and_policies_see_ordered_tiers(cluster):
    ids = topology.gpus(cluster)
    truth = sample_measured(ids, np.random.default_rng(0))
    assert truth == sample_measured(ids, np.random.default_rng(0))
    seen = tiered(truth)
    for c in ("classA", "classB", "classC", "classD"):
        values = [truth[g][c] for g in ids]
        tiers = [seen[g][c] for g in ids]
        assert len(set(tiers)) <= len(set(values))
        order = np.argsort(values, kind="stable")
        assert np.all(np.diff(np.array(tiers)[order]) >= -1e-12)  # a slower GPU never looks faster


def test_a_rounds_topology_comes_from_racks_or_from_node_link_json():
    import networkx as nx

    from schedlab.io import cluster_to_dict, parse_round_input

    seen, truth = make_cluster(ClusterSpec(8, 4, racks=2, uplink_gbps=25.0, variability="measured"))
    assert seen.has_variability and truth.has_variability and seen != truth  # tiers seen, slowest runs true
    graph = topology.cluster_graph(seen)
    assert graph.nodes["gpu:n0/1"]["slowdown"] == {c: f[1] for c, f in seen.nodes[0].slowdown.items()}
    assert topology.spread_gbps(seen, ["n0", "n1"], graph) == 100.0  # one rack: the node links
    assert topology.spread_gbps(seen, ["n0", "n7"], graph) == 25.0  # across racks: the uplink
    raw = {"cluster": cluster_to_dict(seen), "jobs": []}
    assert parse_round_input(raw).cluster == seen
    as_graph = {"nodes": raw["cluster"]["nodes"],
                "topology": {"graph": nx.node_link_data(graph, edges="links"), "across_node_factor": 1.0}}
    assert parse_round_input({"cluster": as_graph, "jobs": []}).cluster.topology == seen.topology


@pytest.mark.parametrize(("topo", "message"), [
    ({"racks": [{"id": "r0", "nodes": ["n0"]}]}, "node 'n1' is in no rack"),
    ({"racks": [{"id": "r0", "nodes": ["n0", "n9"]}]}, "node 'n9' is not in cluster.nodes"),
    ({"racks": [{"id": "r0", "nodes": ["n0", "n1"], "uplink_gbps": 0}]}, "uplink_gbps: must be > 0"),
    ({"across_node_factor": 0.5}, "across_node_factor: must be >= 1"),
    ({"graph": {"nodes": []}}, "cluster.topology.graph"),
    ({"rack": []}, "cluster.topology.rack: unknown key"),
])
def test_bad_topologies_are_named(topo, message):
    from schedlab.errors import InputError
    from schedlab.io import parse_round_input

    nodes = [{"id": "n0", "gpus": 2, "slowdown": {"classA": [1.0, 1.2]}}, {"id": "n1", "gpus": 2}]
    with pytest.raises(InputError, match=message):
        parse_round_input({"cluster": {"nodes": nodes, "topology": topo}, "jobs": []})


def test_a_slowdown_list_must_match_the_nodes_gpus():
    from schedlab.errors import InputError
    from schedlab.io import parse_round_input

    with pytest.raises(InputError, match=r"cluster.nodes\[0\].slowdown.classA: must list one factor per GPU \(2\)"):
        parse_round_input({"cluster": {"nodes": [{"id": "n0", "gpus": 2, "slowdown": {"classA": [1.0]}}]}, "jobs": []})


@pytest.mark.parametrize("bad, message", [
    (-1, "must be > 0, got -1"), (True, "must be a number, got True"), (float("nan"), "must be a finite number, got nan"),
    (1e9, "must be <= 1000"), ("2", "must be a number, got '2'"),
])
@pytest.mark.parametrize("as_object", [False, True])
def test_each_bad_slowdown_factor_is_named_by_its_gpu_index(bad, message, as_object):
    from schedlab.errors import InputError
    from schedlab.io import parse_round_input
    from schedlab.state import Cluster, Node, RoundInput

    node = {"id": "n0", "gpus": 2, "slowdown": {"classA": [1.0, bad]}}
    raw = ({"cluster": {"nodes": [node]}, "jobs": []} if not as_object
           else RoundInput(Cluster((Node("n0", 2, slowdown={"classA": (1.0, bad)}),)), ()))
    with pytest.raises(InputError) as info:
        parse_round_input(raw)
    [problem] = info.value.problems
    assert problem.startswith(f"cluster.nodes[0].slowdown.classA[1]: {message}")
