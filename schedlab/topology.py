"""Cluster topology as a networkx graph: GPU - node - rack - spine, with link bandwidths.

Vertices are strings with a `kind` attribute: "spine", "rack:R", "node:N" and "gpu:N/K" (GPU K
of node N); edges carry `bandwidth_gbps`. Per-GPU slowdown factors per application class
(models.variability) live on the GPU vertices as `slowdown` = {class: factor}.

`cluster_graph` builds the graph of a round's Cluster (state.Topology: racks with uplinks, node
and GPU links; node ids as given), `topology_from_graph` reads node-link JSON back into it.

The locality of a GPU set is derived from the graph, never tabulated per case: the nodes and
racks its GPUs hang from, and the bottleneck bandwidth of the tree paths joining them (the
smallest edge bandwidth on the union of the paths from every GPU to their lowest common
ancestor).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import networkx as nx

from schedlab.errors import ConfigError
from schedlab.state import Cluster, GpuRef, Rack, Topology

__all__ = ["Locality", "cluster_graph", "gpu_id", "gpus", "load", "locality", "node_of", "rack_of", "save",
           "spread_gbps", "topology_from_graph"]


def gpu_id(node: int | str, gpu: int) -> str:
    """The graph's name of a GPU: ``gpu:`` and its id (GpuRef.key), e.g. ``gpu:n3/1``."""
    return f"gpu:{GpuRef(str(node), gpu).key}"


def gpus(graph: nx.Graph) -> list[str]:
    """Every GPU vertex of the graph (``kind == "gpu"``), in the graph's vertex order."""
    return [v for v, kind in graph.nodes(data="kind") if kind == "gpu"]


def node_of(graph: nx.Graph, gpu: str) -> str:
    """The node vertex (``node:N``) a GPU vertex hangs from.

    Raises
    ------
    ConfigError
        When no neighbour of `gpu` is of kind "node".
    """
    return _parent(graph, gpu, "node")


def rack_of(graph: nx.Graph, gpu: str) -> str:
    """The rack vertex (``rack:R``) above a GPU vertex's node.

    Raises
    ------
    ConfigError
        When the GPU has no node above it, or its node no rack.
    """
    return _parent(graph, node_of(graph, gpu), "rack")


def _parent(graph: nx.Graph, vertex: str, kind: str) -> str:
    for up in graph.neighbors(vertex):
        if graph.nodes[up]["kind"] == kind:
            return up
    raise ConfigError(f"topology: {vertex} has no {kind} above it")


@dataclass(frozen=True)
class Locality:
    """Where a GPU set lies in the tree: what `locality` derives from the graph.

    Attributes
    ----------
    nodes, racks
        The distinct nodes and racks its GPUs hang from.
    bottleneck_gbps
        The smallest link bandwidth (Gbit/s) on the tree paths joining its GPUs: the narrowest
        link its collective traffic crosses.
    """

    nodes: int
    racks: int
    bottleneck_gbps: float  # inf for one GPU


def locality(graph: nx.Graph, gpu_set: Iterable[str]) -> Locality:
    """Nodes and racks spanned and the bottleneck bandwidth joining the GPUs.

    The bottleneck is the smallest ``bandwidth_gbps`` on the union of the shortest (tree) paths
    from the first GPU to every other: in a tree, the subtree joining the GPUs through their
    lowest common ancestor (module docstring).

    Parameters
    ----------
    graph
        A topology graph (`cluster_graph`'s or `load`'s).
    gpu_set
        GPU vertices (``gpu:N/K``).

    Returns
    -------
    Locality
        Nodes, racks and bottleneck (Gbit/s). One GPU spans 1 node and 1 rack at an infinite
        bottleneck (an empty set: 0, 0, inf).

    Raises
    ------
    ConfigError
        When a member is not a GPU vertex of `graph`.
    """
    members = list(gpu_set)
    unknown = [v for v in members if graph.nodes.get(v, {}).get("kind") != "gpu"]
    if unknown:
        raise ConfigError(f"topology: {unknown[0]!r} is not a GPU of this cluster")
    if len(members) <= 1:
        return Locality(len(members), len(members), float("inf"))
    paths = [nx.shortest_path(graph, members[0], v) for v in members[1:]]
    edges = {frozenset(e) for p in paths for e in zip(p, p[1:])}
    bottleneck = min(graph.edges[tuple(e)]["bandwidth_gbps"] for e in edges)
    return Locality(len({node_of(graph, v) for v in members}), len({rack_of(graph, v) for v in members}), bottleneck)


def save(graph: nx.Graph, path: str | Path) -> None:
    """Write the graph to `path` as networkx node-link JSON (edges under "links"), which `load` reads."""
    Path(path).write_text(json.dumps(nx.node_link_data(graph, edges="links"), indent=1))


def load(path: str | Path) -> nx.Graph:
    """Read a topology graph written by `save` (networkx node-link JSON, edges under "links").

    Raises
    ------
    ConfigError
        When the file cannot be read or parsed, or the graph has no "spine" vertex or no GPU
        vertex (``kind == "gpu"``).
    """
    try:
        data = json.loads(Path(path).read_text())
        graph = nx.node_link_graph(data, edges="links")
    except (OSError, json.JSONDecodeError, KeyError, nx.NetworkXError) as exc:
        raise ConfigError(f"cannot read topology {path}: {exc}") from exc
    if "spine" not in graph or not gpus(graph):
        raise ConfigError(f"topology {path}: needs a 'spine' vertex and GPU vertices (kind='gpu')")
    return graph


def cluster_graph(cluster: Cluster) -> nx.Graph:
    """The graph of a round's cluster, spine - rack - node - GPU, with link bandwidths.

    Its racks are the topology's (one rack "r0" of every node without a topology), each joined
    to the spine at its ``uplink_gbps``; "node:<id>" vertices under their rack at
    ``Topology.node_gbps``; GPUs "gpu:<id>/<index>" under their node at ``Topology.gpu_gbps``,
    each carrying ``slowdown`` = {class: factor} from Node.slowdown, and its node id and index.
    """
    topo = cluster.topology or Topology(racks=(Rack("r0", tuple(n.id for n in cluster.nodes)),))
    g = nx.Graph()
    g.add_node("spine", kind="spine")
    by_id = {n.id: n for n in cluster.nodes}
    for rack in topo.racks:
        g.add_node(f"rack:{rack.id}", kind="rack")
        g.add_edge("spine", f"rack:{rack.id}", bandwidth_gbps=rack.uplink_gbps)
        for node_id in rack.nodes:
            node = by_id[node_id]
            g.add_node(f"node:{node_id}", kind="node")
            g.add_edge(f"rack:{rack.id}", f"node:{node_id}", bandwidth_gbps=topo.node_gbps)
            for k in range(node.gpus):
                slowdown = {c: f[k] for c, f in node.slowdown.items()}
                g.add_node(gpu_id(node_id, k), kind="gpu", node=node_id, index=k, slowdown=slowdown)
                g.add_edge(f"node:{node_id}", gpu_id(node_id, k), bandwidth_gbps=topo.gpu_gbps)
    return g


def topology_from_graph(data: Mapping, node_ids: list[str], across_node_factor: float = 1.0) -> Topology:
    """The compact topology (state.Topology) of a networkx node-link graph.

    The graph's "node:<id>" vertices are the cluster's nodes, each under one "rack" vertex
    under the "spine". Per-link bandwidths are kept per rack (its uplink); the node and GPU
    links take the graph's smallest of each (the Topology defaults where it has none).

    Parameters
    ----------
    data
        The graph as node-link data (edges under "links").
    node_ids
        The cluster's node ids, every one of which must be under a rack.
    across_node_factor
        PAL's flat locality penalty, kept as given.

    Raises
    ------
    ValueError
        When `data` is not a node-link graph, has no spine, a rack is not joined to the spine,
        or a node of `node_ids` is under no rack.
    """
    try:
        graph = nx.node_link_graph(data, edges="links")
    except (KeyError, TypeError, nx.NetworkXError) as exc:
        raise ValueError(f"not a networkx node-link graph ({exc})") from None
    if "spine" not in graph:
        raise ValueError("needs a 'spine' vertex")
    racks: list[Rack] = []
    node_bw, gpu_bw = [], []
    for rack in sorted(v for v, kind in graph.nodes(data="kind") if kind == "rack"):
        if not graph.has_edge("spine", rack):
            raise ValueError(f"rack {rack!r} is not joined to the spine")
        members = sorted(v for v in graph.neighbors(rack) if graph.nodes[v].get("kind") == "node")
        node_bw += [graph.edges[rack, v]["bandwidth_gbps"] for v in members]
        gpu_bw += [graph.edges[v, u]["bandwidth_gbps"] for v in members for u in graph.neighbors(v)
                   if graph.nodes[u].get("kind") == "gpu"]
        racks.append(Rack(rack.removeprefix("rack:"), tuple(v.removeprefix("node:") for v in members),
                          float(graph.edges["spine", rack]["bandwidth_gbps"])))
    listed = {n for r in racks for n in r.nodes}
    missing = [n for n in node_ids if n not in listed]
    if missing:
        raise ValueError(f"cluster node {missing[0]!r} has no vertex 'node:{missing[0]}' under a rack")
    return Topology(tuple(racks), float(min(node_bw, default=Topology.node_gbps)),
                    float(min(gpu_bw, default=Topology.gpu_gbps)), across_node_factor)


def spread_gbps(cluster: Cluster, node_ids: Iterable[str], graph: nx.Graph | None = None) -> float:
    """Bottleneck bandwidth (Gbit/s) joining the given nodes, from the cluster's graph.

    The smallest link bandwidth on the tree paths from the first node (in id order) to every
    other: the bandwidth a job spread over these nodes syncs at. Infinite for one node or none.
    `graph` is the cluster's `cluster_graph`, built here when not given (callers pricing many
    spreads build it once).
    """
    nodes = sorted(set(node_ids))
    if len(nodes) <= 1:
        return float("inf")
    graph = graph if graph is not None else cluster_graph(cluster)
    paths = [nx.shortest_path(graph, f"node:{nodes[0]}", f"node:{v}") for v in nodes[1:]]
    return float(min(graph.edges[e]["bandwidth_gbps"] for p in paths for e in zip(p, p[1:])))
