"""Turning chosen shapes into concrete GPUs (node id, GPU index).

Within a node GPUs are interchangeable, so a node is just its set of free GPU indices. Stay
options take back their exact GPUs first; new shapes are then placed largest first, each on
the fullest node that still fits it (best fit). For sizes from a divisibility chain this
never fails when the round model's per-level counts hold: placing an item of size D, a
multiple of every smaller level d, lowers sum_k floor(free_k / d) by exactly D / d whichever
node takes it, so the counts that the model checked stay true for the items still to come.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from schedlab.state import Cluster, GpuRef

__all__ = ["NodeState"]

_ALL_FREE = "formulations.packing: every GPU free"  # Cluster.derived's key


def _all_free(cluster: Cluster) -> tuple[tuple[int, ...], ...]:
    """Every node's GPU indices."""
    return tuple(tuple(range(n.gpus)) for n in cluster.nodes)


class NodeState:
    """Free GPU indices per node, in cluster order, and for each group of nodes asked for its
    nodes bucketed by free count, so that a best-fit or most-free take costs O(G) instead of a
    scan of the group (2,048 GPUs / 1,000 jobs: decoding 100 ms -> a few). Change `free` only
    through set_free."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        # every GPU free: the cluster's own tuples, shared (set_free puts a node's new list in
        # place, never changes one): a list per node each round was a tenth of decoding a
        # 10-job round on 512 nodes
        self.free: list[Sequence[int]] = list(cluster.derive(_ALL_FREE, lambda: _all_free(cluster)))
        self.index = cluster.node_index
        self.free_gpus = cluster.total_gpus
        self._buckets: dict[tuple[int, ...], list[list[int]]] = {}  # nodes -> [sorted nodes with f free]
        # node -> the buckets of each group it is in (not the group's tuple of nodes: a dict look-up
        # hashed that tuple on every take, 16,384 GPUs: 0.15 s a round)
        self._groups_of: dict[int, list[list[list[int]]]] = {}
        self._by_id: dict[int, tuple[tuple[int, ...], list[list[int]]]] = {}  # id(nodes) -> (nodes, buckets)

    def take_exact(self, gpus: tuple[GpuRef, ...]) -> bool:
        """Take these exact GPUs if all are free (a job staying where it is)."""
        wanted: dict[int, set[int]] = {}
        for g in gpus:
            wanted.setdefault(self.index[g.node], set()).add(g.gpu)
        if not all(ids <= set(self.free[k]) for k, ids in wanted.items()):
            return False
        for k, ids in wanted.items():
            self.set_free(k, [i for i in self.free[k] if i not in ids])
        return True

    def take_most_free(self, count: int, nodes: tuple[int, ...] | None = None) -> tuple[GpuRef, ...]:
        """Take `count` GPUs from the nodes with the most free GPUs first, spilling over as many
        nodes as needed (ties: cluster order); the placement of the artifact's baselines. Only
        from `nodes` (indices) where given; ValueError when they have fewer GPUs free."""
        nodes = tuple(range(len(self.free))) if nodes is None else nodes
        free = self.free_gpus if len(nodes) == len(self.free) else sum(len(self.free[k]) for k in nodes)
        if count > free:
            raise ValueError(f"asked for {count} GPUs, {free} free")
        buckets = self._bucketed(nodes)
        refs: list[GpuRef] = []
        while len(refs) < count:
            k = next(bucket[0] for bucket in reversed(buckets) if bucket)
            n = min(len(self.free[k]), count - len(refs))
            refs += [GpuRef(self.cluster.nodes[k].id, i) for i in self.free[k][:n]]
            self.set_free(k, self.free[k][n:])
        return tuple(refs)

    def take_shape(self, nodes: tuple[int, ...], num_nodes: int, gpus_per_node: int) -> tuple[GpuRef, ...] | None:
        """Take gpus_per_node GPUs on each of num_nodes nodes from `nodes`, best fit (the fewest
        free GPUs that fit, then the lowest index); None if impossible."""
        chosen: list[int] = []
        for bucket in self._bucketed(nodes)[gpus_per_node:]:
            chosen += bucket[: num_nodes - len(chosen)]
            if len(chosen) == num_nodes:
                break
        else:
            return None
        refs = []
        for k in sorted(chosen):
            refs += [GpuRef(self.cluster.nodes[k].id, i) for i in self.free[k][:gpus_per_node]]
            self.set_free(k, self.free[k][gpus_per_node:])
        return tuple(refs)

    def _bucketed(self, nodes: tuple[int, ...]) -> list[list[int]]:
        # Hashing a group's tuple of thousands of nodes on every take cost more than the take
        # (16,384 GPUs: 0.12 s a round): a tuple seen before is found by identity. The entry
        # holds the tuple, so its id is not reused while the entry lives.
        seen = self._by_id.get(id(nodes))
        if seen is not None and seen[0] is nodes:
            return seen[1]
        if nodes not in self._buckets:
            buckets: list[list[int]] = [[] for _ in range(max(len(self.free[k]) for k in nodes) + 1)] if nodes else [[]]
            for k in sorted(nodes):
                buckets[len(self.free[k])].append(k)
                self._groups_of.setdefault(k, []).append(buckets)
            self._buckets[nodes] = buckets
        self._by_id[id(nodes)] = (nodes, self._buckets[nodes])
        return self._buckets[nodes]

    def set_free(self, k: int, free: Sequence[int]) -> None:
        """Set node k's free GPU indices, keeping the free count and every bucket in step."""
        self.free_gpus += len(free) - len(self.free[k])
        for buckets in self._groups_of.get(k, ()):
            buckets[len(self.free[k])].remove(k)
            bisect.insort(buckets[len(free)], k)
        self.free[k] = free
