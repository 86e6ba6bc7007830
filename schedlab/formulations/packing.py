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
from functools import lru_cache

import numpy as np

from schedlab.state import Cluster, GpuRef

__all__ = ["NodeState"]

_ALL_FREE = "formulations.packing: every GPU free"  # Cluster.derived's key


def _all_free(cluster: Cluster) -> tuple[tuple[int, ...], ...]:
    """Every node's GPU indices."""
    return tuple(tuple(range(n.gpus)) for n in cluster.nodes)


_NODE_GPUS = "formulations.packing: GPUs per node"  # Cluster.derived's key


def _node_gpus(cluster: Cluster) -> np.ndarray:
    """Every node's GPU count, in cluster order."""
    return np.array([n.gpus for n in cluster.nodes], dtype=int)


@lru_cache(maxsize=64)  # a round's groups, met again every round; bounded, as ONES's orderings of a group come and go
def _sorted_nodes(nodes: tuple[int, ...]) -> tuple[np.ndarray, frozenset[int]]:
    """A group's nodes sorted (read-only: shared by every round), and as a set."""
    at = np.unique(np.asarray(nodes, dtype=int))
    at.flags.writeable = False
    return at, frozenset(at.tolist())


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
        self._changed: set[int] = set()  # nodes with a GPU taken
        # each group asked for: its nodes, their set, and its buckets (nodes by free count, sorted)
        self._groups: list[tuple[tuple[int, ...], frozenset[int], list[list[int]]]] = []
        self._by_id: dict[int, list[list[int]]] = {}  # id(nodes) -> buckets (the tuple is in _groups)

    def take_exact(self, gpus: tuple[GpuRef, ...]) -> bool:
        """Take these exact GPUs if all are free (a job staying where it is); False, taking
        none, where one is not (or does not exist, or comes twice)."""
        layout = self.cluster.layout(gpus)  # a stayer's tuple is met round after round
        changed = self._changed
        if not layout.valid:
            return False
        if not self._groups and changed.isdisjoint(layout.per_node):
            # its nodes wholly free and no group bucketed yet (stayers come first): each node
            # keeps the layout's rest, with no bucket to keep in step
            for k, rest in layout.rest.items():
                self.free[k] = rest
            self.free_gpus -= len(layout.keys)
            changed.update(layout.per_node)
            return True
        if not all(k not in changed or ids.issubset(self.free[k]) for k, ids in layout.per_node.items()):
            return False
        for k, ids in layout.per_node.items():
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
            node = self.cluster.node_refs(k)
            refs += [node[i] for i in self.free[k][:n]]
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
            node = self.cluster.node_refs(k)
            refs += [node[i] for i in self.free[k][:gpus_per_node]]
            self.set_free(k, self.free[k][gpus_per_node:])
        return tuple(refs)

    def take_shapes(self, nodes: tuple[int, ...], num_nodes: int, gpus_per_node: int,
                    count: int) -> list[tuple[GpuRef, ...]]:
        """`count` takes of take_shape(nodes, num_nodes, gpus_per_node) in turn, the same GPUs in
        the same order; where they do not all fit, the takes that do (fewer than `count`).
        Single-node takes go at once: a node best fit takes from only gets fuller, so it stays
        the fullest that fits until it no longer fits, and the takes fill the nodes that fit in
        (free, index) order, each with as many as it holds (one by one, a 64-GPU round's 50
        takes cost ~4 us each)."""
        refs: list[tuple[GpuRef, ...]] = []
        if num_nodes != 1:
            while len(refs) < count and (taken := self.take_shape(nodes, num_nodes, gpus_per_node)) is not None:
                refs.append(taken)
            return refs
        z, buckets = gpus_per_node, self._bucketed(nodes)
        for f in range(z, len(buckets)):
            for k in tuple(buckets[f]):  # a node filled moves to a bucket below z
                free, node = self.free[k], self.cluster.node_refs(k)
                fits = min(len(free) // z, count - len(refs))
                refs += [tuple(node[i] for i in free[q: q + z]) for q in range(0, fits * z, z)]
                self.set_free(k, free[fits * z:])
                if len(refs) == count:
                    return refs
        return refs

    def _bucketed(self, nodes: tuple[int, ...]) -> list[list[int]]:
        # Hashing a group's tuple of thousands of nodes on every take cost more than the take
        # (16,384 GPUs: 0.12 s a round): a tuple seen before is found by identity (_groups holds
        # it, so its id is not reused). Its buckets are made in numpy: a loop over 512 nodes was
        # a tenth of decoding a 10-job round.
        buckets = self._by_id.get(id(nodes))
        if buckets is not None:
            return buckets
        at, members = _sorted_nodes(nodes)
        free = self.cluster.derive(_NODE_GPUS, lambda: _node_gpus(self.cluster))[at]
        if changed := list(self._changed & members):
            free[np.searchsorted(at, changed)] = [len(self.free[k]) for k in changed]
        buckets = [at[free == f].tolist() for f in range(int(free.max(initial=0)) + 1)]
        self._groups.append((nodes, members, buckets))
        self._by_id[id(nodes)] = buckets
        return buckets

    def set_free(self, k: int, free: Sequence[int]) -> None:
        """Set node k's free GPU indices, keeping the free count and every bucket in step."""
        self.free_gpus += len(free) - len(self.free[k])
        for _, members, buckets in self._groups:
            if k in members:
                buckets[len(self.free[k])].remove(k)
                bisect.insort(buckets[len(free)], k)
        self.free[k] = free
        self._changed.add(k)
