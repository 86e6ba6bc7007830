"""Turning chosen shapes into concrete GPUs (node id, GPU index).

Within a node GPUs are interchangeable, so a node is just its set of free GPU indices. Stay
options take back their exact GPUs first; new shapes are then placed largest first, each on
the fullest node that still fits it (best fit). For sizes from a divisibility chain this
never fails when the round model's per-level counts hold: placing an item of size D, a
multiple of every smaller level d, lowers sum_k floor(free_k / d) by exactly D / d whichever
node takes it, so the counts that the model checked stay true for the items still to come.
"""

from __future__ import annotations

from schedlab.state import Cluster, GpuRef


class NodeState:
    """Free GPU indices per node, in cluster order."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self.free = [list(range(n.gpus)) for n in cluster.nodes]
        self.index = {n.id: k for k, n in enumerate(cluster.nodes)}

    def take_exact(self, gpus: tuple[GpuRef, ...]) -> bool:
        """Take these exact GPUs if all are free (a job staying where it is)."""
        wanted = [(self.index[g.node], g.gpu) for g in gpus]
        if not all(i in self.free[k] for k, i in wanted):
            return False
        for k, i in wanted:
            self.free[k].remove(i)
        return True

    def take_most_free(self, count: int) -> tuple[GpuRef, ...]:
        """Take `count` GPUs from the nodes with the most free GPUs first, spilling over as many
        nodes as needed (ties: cluster order); the placement of the artifact's baselines."""
        if count > sum(map(len, self.free)):
            raise ValueError(f"asked for {count} GPUs, {sum(map(len, self.free))} free")
        refs: list[GpuRef] = []
        while len(refs) < count:
            k = max(range(len(self.free)), key=lambda k: len(self.free[k]))
            n = min(len(self.free[k]), count - len(refs))
            refs += [GpuRef(self.cluster.nodes[k].id, i) for i in self.free[k][:n]]
            del self.free[k][:n]
        return tuple(refs)

    def take_shape(self, nodes: tuple[int, ...], num_nodes: int, gpus_per_node: int) -> tuple[GpuRef, ...] | None:
        """Take gpus_per_node GPUs on each of num_nodes nodes from `nodes`, best fit; None if impossible."""
        fits = [k for k in nodes if len(self.free[k]) >= gpus_per_node]
        if len(fits) < num_nodes:
            return None
        chosen = sorted(fits, key=lambda k: (len(self.free[k]), k))[:num_nodes]
        refs = []
        for k in sorted(chosen):
            taken, self.free[k] = self.free[k][:gpus_per_node], self.free[k][gpus_per_node:]
            refs += [GpuRef(self.cluster.nodes[k].id, i) for i in taken]
        return tuple(refs)
