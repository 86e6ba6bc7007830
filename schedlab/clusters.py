"""Simulated clusters as data: node pools of GPU types, racks and PAL's measured GPU variability.

A cluster is one or more node pools (NodePool: a GPU type, a node count, GPUs per node), their
nodes numbered n0, n1, ... in the pools' order; a ClusterSpec without `pools` is one pool of its
`num_nodes` x `gpus_per_node` GPUs of `gpu_type`.

`make_cluster(spec)` gives the cluster twice: as a scheduler sees it (what goes into a round)
and as it really runs (the replay's truth). Variability, by name (VARIABILITY):
    none        every GPU runs at 1
    measured    PAL's simulator: each GPU runs, per class, at a measured Longhorn GPU's slowest
                run (models.variability.sample_measured); the scheduler sees PAL's k-means tiers
                of the cluster's own values (models.variability.tiered)
    centroids   each GPU draws a measured GPU's cluster centroid per class; truth = what is seen
Racks: `racks` > 0 spreads the nodes evenly over that many racks (nodes_per_rack = ceil), each
rack's uplink `uplink_gbps`, each node's link `node_gbps`; 0 leaves the topology out. Racks and
variability apply over every pool alike: the racks take the nodes in order, the variability
draws every GPU.

`parse_pools` reads a cluster's pools as written on a command line or in a config: TYPE:NODESxGPUS
pools joined by commas (`v100:9x4,p100:9x4,k80:9x4`), or Gavel's V:P:K GPU counts of V100, P100
and K80 (`36:36:36`, GAVEL_GPUS_PER_SERVER GPUs per server); `pools_text` writes them back;
`as_pools` also takes them as data (JSON/TOML: a list of {gpu_type, num_nodes, gpus_per_node}).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from schedlab.errors import ConfigError
from schedlab.models.variability import assign_slowdowns, sample_measured, tiered
from schedlab.state import Cluster, GpuRef, Node, Rack, Topology

__all__ = ["GAVEL_GPUS_PER_SERVER", "GAVEL_TYPES", "VARIABILITY", "ClusterSpec", "NodePool", "make_cluster", "as_pools",
           "parse_pools", "pools_text"]

Slowdowns = dict[str, dict[str, float]]  # GPU id -> class -> factor


def _none(ids: list[str], rng: np.random.Generator, seed: int) -> tuple[Slowdowns, Slowdowns]:
    return {}, {}


def _measured(ids: list[str], rng: np.random.Generator, seed: int) -> tuple[Slowdowns, Slowdowns]:
    truth = sample_measured(ids, rng)
    return tiered(truth, seed), truth


def _centroids(ids: list[str], rng: np.random.Generator, seed: int) -> tuple[Slowdowns, Slowdowns]:
    seen = assign_slowdowns(ids, rng)
    return seen, seen


VARIABILITY: dict[str, Callable[[list[str], np.random.Generator, int], tuple[Slowdowns, Slowdowns]]] = {
    "none": _none, "measured": _measured, "centroids": _centroids,
}


@dataclass(frozen=True)
class NodePool:
    """`num_nodes` alike nodes of `gpus_per_node` GPUs of `gpu_type`."""

    gpu_type: str
    num_nodes: int
    gpus_per_node: int

    def __post_init__(self):
        if not self.gpu_type or self.num_nodes < 1 or self.gpus_per_node < 1:
            raise ConfigError(f"node pool {self.gpu_type!r}: needs a GPU type name, num_nodes >= 1 and "
                              f"gpus_per_node >= 1, got {self.num_nodes} x {self.gpus_per_node}")


@dataclass(frozen=True)
class ClusterSpec:
    """A simulated cluster: its shape, GPU type, racks and links, PAL's flat across-node factor,
    GPU variability (a key of VARIABILITY) and the seed of its draws; checked when made.

    `pools`, where given, is the cluster's shape and its GPU types (several types); num_nodes,
    gpus_per_node and gpu_type then only describe it (the first pool's type, the pools' nodes,
    the largest node), so every reader of them stays right.
    """

    num_nodes: int = 16
    gpus_per_node: int = 4
    gpu_type: str = "default"
    racks: int = 0
    node_gbps: float = 100.0
    uplink_gbps: float = 100.0
    across_node_factor: float = 1.0
    variability: str = "none"
    seed: int = 0  # the measured GPUs drawn, and PAL's k-means
    pools: tuple[NodePool, ...] = ()

    def __post_init__(self):
        if self.pools:  # the pools are the shape; the single-pool fields describe them
            object.__setattr__(self, "pools", tuple(self.pools))
            object.__setattr__(self, "num_nodes", sum(p.num_nodes for p in self.pools))
            object.__setattr__(self, "gpus_per_node", max(p.gpus_per_node for p in self.pools))
            object.__setattr__(self, "gpu_type", self.pools[0].gpu_type)
        problems = [f"{k} must be >= 1" for k in ("num_nodes", "gpus_per_node") if getattr(self, k) < 1]
        if self.racks < 0:
            problems.append("racks must be >= 0 (0: no topology)")
        if self.variability not in VARIABILITY:
            problems.append(f"variability {self.variability!r}: use one of {', '.join(VARIABILITY)}")
        if self.across_node_factor < 1 or self.node_gbps <= 0 or self.uplink_gbps <= 0:
            problems.append("across_node_factor >= 1, node_gbps and uplink_gbps > 0")
        if problems:
            raise ConfigError("cluster: " + "; ".join(problems))

    @property
    def node_pools(self) -> tuple[NodePool, ...]:
        """The cluster's pools: `pools`, else the one pool of its single-type fields."""
        return self.pools or (NodePool(self.gpu_type, self.num_nodes, self.gpus_per_node),)

    @property
    def gpu_types(self) -> tuple[str, ...]:
        """The pools' GPU types, each once, in the pools' order."""
        return tuple(dict.fromkeys(p.gpu_type for p in self.node_pools))

    @property
    def total_gpus(self) -> int:
        """GPUs of every pool together."""
        return sum(p.num_nodes * p.gpus_per_node for p in self.node_pools)


def _node_slowdown(slowdowns: Slowdowns, ids: list[str]) -> dict[str, tuple[float, ...]]:
    if not slowdowns:
        return {}
    classes = slowdowns[ids[0]]
    return {c: tuple(slowdowns[g][c] for g in ids) for c in classes}


def make_cluster(spec: ClusterSpec) -> tuple[Cluster, Cluster]:
    """The cluster `spec` describes, as a scheduler sees it and as it runs.

    Returns
    -------
    tuple of Cluster
        (seen, truth): the same nodes, ids n0, n1, ..., and topology; they differ only in the
        GPUs' slowdown factors (the variability's, module docstring).

    Examples
    --------
    >>> seen, truth = make_cluster(ClusterSpec(num_nodes=2, gpus_per_node=4, racks=2))
    >>> [node.id for node in seen.nodes], [rack.id for rack in seen.topology.racks]
    (['n0', 'n1'], ['r0', 'r1'])
    """
    shapes = [(p.gpu_type, p.gpus_per_node) for p in spec.node_pools for _ in range(p.num_nodes)]
    names = [f"n{k}" for k in range(len(shapes))]
    ids_of = [[GpuRef(name, i).key for i in range(g)] for name, (_, g) in zip(names, shapes, strict=True)]
    ids = [gpu for node in ids_of for gpu in node]
    seen, truth = VARIABILITY[spec.variability](ids, np.random.default_rng(spec.seed), spec.seed)
    topology = None
    if spec.racks or spec.across_node_factor != 1.0:
        per_rack = math.ceil(len(names) / max(spec.racks, 1))
        racks = tuple(Rack(f"r{r}", tuple(names[r * per_rack:(r + 1) * per_rack]), spec.uplink_gbps)
                      for r in range(math.ceil(len(names) / per_rack)))
        topology = Topology(racks, spec.node_gbps, across_node_factor=spec.across_node_factor)

    def cluster(slowdowns: Slowdowns) -> Cluster:
        nodes = tuple(Node(name, g, gpu_type, _node_slowdown(slowdowns, node_ids))
                      for name, (gpu_type, g), node_ids in zip(names, shapes, ids_of, strict=True))
        return Cluster(nodes, topology)

    return cluster(seen), cluster(truth)


# Gavel's cluster spec (scheduler/scripts/drivers/simulate_scheduler_with_trace.py, --cluster_spec):
# GPU counts of these types, in this order, on servers of --num_gpus_per_server GPUs (default 1:1:1)
GAVEL_TYPES = ("v100", "p100", "k80")
GAVEL_GPUS_PER_SERVER = 1
_POOL = re.compile(r"([A-Za-z][\w.-]*):(\d+)x(\d+)")
_GAVEL = re.compile(r"\d+:\d+:\d+")
_FORMS = ("give TYPE:NODESxGPUS pools joined by commas, e.g. v100:9x4,p100:9x4,k80:9x4, or Gavel's V100:P100:K80 "
          "GPU counts, e.g. 36:36:36")


def parse_pools(text: str, where: str = "--cluster") -> tuple[NodePool, ...]:
    """The node pools `text` writes (module docstring); ConfigError naming `where` and the forms.

    GPU types are lower-cased; Gavel's form leaves out a type of 0 GPUs, as Gavel does.

    Examples
    --------
    >>> parse_pools("v100:9x4,k80:2x8")
    (NodePool(gpu_type='v100', num_nodes=9, gpus_per_node=4), NodePool(gpu_type='k80', num_nodes=2, gpus_per_node=8))
    >>> [p.num_nodes for p in parse_pools("36:36:0")]
    [36, 36]
    """
    text = text.strip()
    if _GAVEL.fullmatch(text):
        pools = tuple(NodePool(t, int(n) // GAVEL_GPUS_PER_SERVER, GAVEL_GPUS_PER_SERVER)
                      for t, n in zip(GAVEL_TYPES, text.split(":"), strict=True) if int(n))
        if not pools:
            raise ConfigError(f"{where} {text}: no GPUs; {_FORMS}")
        return pools
    read: list[NodePool] = []
    for part in (part.strip() for part in text.split(",")):
        match = _POOL.fullmatch(part)
        if match is None:
            raise ConfigError(f"{where} {text}: cannot read {part!r}; {_FORMS}")
        gpu_type, nodes, gpus = match.group(1).lower(), int(match.group(2)), int(match.group(3))
        if nodes < 1 or gpus < 1:
            raise ConfigError(f"{where} {text}: {part!r} needs at least 1 node of at least 1 GPU")
        read.append(NodePool(gpu_type, nodes, gpus))
    return tuple(read)


def pools_text(pools: tuple[NodePool, ...]) -> str:
    """The pools as parse_pools reads them, TYPE:NODESxGPUS joined by commas.

    Examples
    --------
    >>> pools_text(parse_pools("V100:2x4, k80:1x8"))
    'v100:2x4,k80:1x8'
    """
    return ",".join(f"{p.gpu_type}:{p.num_nodes}x{p.gpus_per_node}" for p in pools)


def as_pools(value: Any, where: str = "cluster") -> tuple[NodePool, ...]:
    """Node pools from what a user gives: a string parse_pools reads, NodePools, or mappings with
    the keys gpu_type, num_nodes and gpus_per_node (a JSON or TOML list of tables).

    Examples
    --------
    >>> as_pools([{"gpu_type": "v100", "num_nodes": 2, "gpus_per_node": 4}]) == parse_pools("v100:2x4")
    True
    """
    if isinstance(value, str):
        return parse_pools(value, where)
    keys = ("gpu_type", "num_nodes", "gpus_per_node")
    if not isinstance(value, Sequence) or not value:
        raise ConfigError(f"{where}: give a string such as \"v100:9x4,k80:9x4\" or a non-empty list of pools")
    pools = []
    for entry in value:
        if isinstance(entry, NodePool):
            pools.append(entry)
            continue
        if not isinstance(entry, Mapping) or set(entry) != set(keys):
            raise ConfigError(f"{where}: a pool is a table of {', '.join(keys)}, got {entry!r}")
        if not isinstance(entry["gpu_type"], str) or not all(
                isinstance(entry[k], int) and not isinstance(entry[k], bool) for k in keys[1:]):
            raise ConfigError(f"{where}: a pool's gpu_type is a name, num_nodes and gpus_per_node integers, got {entry!r}")
        pools.append(NodePool(entry["gpu_type"].lower(), entry["num_nodes"], entry["gpus_per_node"]))
    return tuple(pools)
