"""The simulated cluster a replay runs on: what the scheduler sees of it and how it really runs.

A replay's world is data (ReplayConfig): the cluster's shape, racks and GPU variability
(clusters.make_cluster), and the replay's semantics. This module turns the cluster part into the
physics the jobs feel. A job on GPUs S of its class a runs, after PAL (Jain et al. SC'24), at the
speed of its slowest GPU: tau = max_{g in S} sf_ga, the true factor (not the tiers a scheduler
sees). Its spread over the topology costs sync time: inter-node sync x B_ref / B with B the
bottleneck bandwidth joining its nodes in the cluster graph and B_ref the node link bandwidth
(ours, as the joint formulation prices it), and the whole step x the topology's
across_node_factor when it spans nodes (PAL's flat penalty).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import networkx as nx

from schedlab.state import Cluster, GpuRef, Topology
from schedlab.topology import cluster_graph, spread_gbps


@dataclass(frozen=True)
class World:
    seen: Cluster  # what goes into every round
    truth: Cluster  # how the GPUs really run
    _nodes: dict = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "_nodes", {n.id: n for n in self.truth.nodes})

    @cached_property
    def graph(self) -> nx.Graph:
        return cluster_graph(self.truth)

    @property
    def plain(self) -> bool:
        """No variability and no topology: every placement runs as the measured tables say."""
        return self.truth.topology is None and not self.truth.has_variability

    def slowest(self, gpus: tuple[GpuRef, ...], app_class: str) -> float:
        """tau: the true slowdown of the slowest GPU for this class."""
        return max(self._nodes[g.node].gpu_slowdown(g.gpu, app_class) for g in gpus)

    def sync_scale(self, gpus: tuple[GpuRef, ...]) -> float:
        """B_ref / B of the links joining the job's nodes (1 on one node)."""
        nodes = {g.node for g in gpus}
        topo = self.truth.topology or Topology()
        if len(nodes) <= 1 or self.truth.topology is None:
            return 1.0
        return topo.node_gbps / min(spread_gbps(self.truth, nodes, self.graph), topo.node_gbps)

    def spread_factor(self, gpus: tuple[GpuRef, ...]) -> float:
        """The across-node factor when the GPUs span nodes, else 1."""
        spans = len({g.node for g in gpus}) > 1
        return self.truth.topology.across_node_factor if spans and self.truth.topology else 1.0
