"""Plain, frozen dataclasses describing one scheduling round and its answer.

Units are in the names: `_s` seconds, `_gpus` GPU counts, `_bsz` batch sizes in examples.
Batch convention (Pollux): a job on `r` GPUs with per-GPU micro-batch `local_bsz` and
`accum_steps` extra accumulation steps trains with total batch r * local_bsz * (accum_steps + 1).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import cached_property, lru_cache
from itertools import chain
from operator import attrgetter
from typing import Any, TypeVar

__all__ = ["APP_CLASS", "DEFAULT_CLASS", "BatchLimits", "Cluster", "FreezePenalty", "FreezeSpec", "GpuLayout", "GpuRef",
           "GradStats", "JobAllocation", "JobSpec", "LayerGroup", "Node", "Rack", "RoundInput", "RoundResult", "Settings",
           "Status", "ThroughputParams", "Topology", "variability_class"]

_T = TypeVar("_T")

# PAL's application classes (models.variability) of the shipped applications: ResNet-like CNNs
# are class A, BERT-like (and, our choice, the RNN DeepSpeech2) class B, and NCF, memory-bound
# like PageRank, class D (our choice).
APP_CLASS = {"cifar10": "classA", "imagenet": "classA", "yolov3": "classA", "bert": "classB",
             "deepspeech2": "classB", "ncf": "classD"}
DEFAULT_CLASS = "classA"


def variability_class(application: str | None, app_class: str | None = None) -> str:
    """The class whose slowdown factors apply: app_class if given, else the application's."""
    return app_class or APP_CLASS.get(application or "", DEFAULT_CLASS)


@dataclass(frozen=True)
class Node:
    """A machine: `gpus` GPUs of one type. `slowdown` maps an application class to one factor per
    GPU index (PAL's measured variability: 1 = typical, 1.3 = 30 % slower); a class it does not
    list runs at 1 on every GPU."""

    id: str
    gpus: int
    gpu_type: str = "default"
    slowdown: Mapping[str, tuple[float, ...]] = field(default_factory=dict)

    def gpu_slowdown(self, gpu: int, app_class: str) -> float:
        """The slowdown factor of GPU index `gpu` for jobs of `app_class` (1.0 where not listed)."""
        factors = self.slowdown.get(app_class)
        return float(factors[gpu]) if factors else 1.0


@dataclass(frozen=True)
class Rack:
    """A switch above some nodes, joined to the spine by an uplink of `uplink_gbps`."""

    id: str
    nodes: tuple[str, ...]
    uplink_gbps: float = 200.0


@dataclass(frozen=True)
class Topology:
    """The network above the nodes (schedlab.topology turns it into a networkx graph).

    node_gbps: each node's link to its rack switch, the bandwidth the throughput models' inter-node
    sync was fitted at; gpu_gbps: GPU to its node (NVLink/PCIe). across_node_factor: PAL's flat
    locality penalty, a job spanning nodes runs this many times slower (1 = none)."""

    racks: tuple[Rack, ...] = ()
    node_gbps: float = 100.0
    gpu_gbps: float = 300.0
    across_node_factor: float = 1.0


@dataclass(frozen=True)
class Cluster:
    """Nodes, and optionally the topology above them (None: one switch, no locality penalty).

    gpu_speed: a relative speed per GPU type (e.g. {"t4": 1.0, "a100": 2.7}), from which a job's
    parameters on a type it has no fitted model for are projected (`projections`); empty: none
    are, and a job runs only on the types it has parameters for.

    A Cluster is a value: a process checks a given Cluster object once (io.parse), and a replay
    hands every round the same one. Change a cluster by building a new one, never by editing
    the dicts it holds (a node's slowdown, gpu_speed) in place."""

    nodes: tuple[Node, ...]
    topology: Topology | None = None
    gpu_speed: Mapping[str, float] = field(default_factory=dict)

    def projections(self, throughput: Mapping[str, ThroughputParams]) -> dict[str, ThroughputParams]:
        """A job's parameters on the cluster's GPU types it has none for, projected by `gpu_speed`
        (as Sia bootstraps a job on a type it has not run on).

        A type is projected where it and some type the job has parameters for both have a
        speed: from the fastest such type (the first by name among equals), its compute scaled
        by their ratio (ThroughputParams.projected); a type without a speed, or a job with no
        fitted type that has one, gets none, and the job does not run there.

        Parameters
        ----------
        throughput
            The job's fitted parameters by GPU type (JobSpec.throughput).

        Returns
        -------
        dict
            GPU type -> projected parameters, for the types the job lacks that can be projected.

        Examples
        --------
        >>> p = ThroughputParams(0.1, 0.01, 0.2, 0.01, 0.05, 0.001, 1.0)
        >>> cluster = Cluster((Node("n0", 4, "t4"), Node("n1", 8, "a100")), gpu_speed={"t4": 1.0, "a100": 2.5})
        >>> cluster.projections({"t4": p})["a100"].alpha_c
        0.04
        """
        if not self.gpu_speed:  # today's rule, and the common case: no projection
            return {}
        fitted = [t for t in sorted(throughput) if t in self.gpu_speed]
        if not fitted:
            return {}
        source = max(fitted, key=lambda t: self.gpu_speed[t])  # max keeps the first of equals
        speed = self.gpu_speed[source]
        return {t: throughput[source].projected(self.gpu_speed[t] / speed)
                for t in sorted(self.gpu_types) if t not in throughput and t in self.gpu_speed}

    # cached: parsing and valuing a round ask once per job (a frozen dataclass without slots
    # keeps cached_property's value in its __dict__, outside the fields)
    @cached_property
    def total_gpus(self) -> int:
        """GPUs of every node together."""
        return sum(n.gpus for n in self.nodes)

    @cached_property
    def gpu_types(self) -> frozenset[str]:
        """The GPU types of the nodes."""
        return frozenset(n.gpu_type for n in self.nodes)

    @cached_property
    def node_index(self) -> dict[str, int]:
        """Node id -> its index in `nodes` (do not mutate: shared by every caller)."""
        return {n.id: k for k, n in enumerate(self.nodes)}

    @cached_property
    def gpu_keys(self) -> frozenset[tuple[str, int]]:
        """Every GPU as (node id, index): what a GPU reference must name to exist."""
        return frozenset((n.id, i) for n in self.nodes for i in range(n.gpus))

    def holds_once(self, held: Iterable[tuple[GpuRef, ...]]) -> bool:
        """Whether every GPU of `held` (one tuple per job) exists in the cluster and none comes
        twice, within a tuple or across them (the check of a round's GPUs at once, before naming
        any that fail it one by one). A tuple whose layout is known (Cluster.layout) is read from
        it; the others' GPUs are checked together, without making them layouts (a round's new
        allocations, most of which are never met again, or every tuple of a round given anew)."""
        known, fresh = [], []
        for gpus in held:
            if not gpus:  # a job that holds none (most of a busy round's)
                continue
            if (layout := self._known_layout(gpus)) is not None:
                known.append(layout)
            else:
                fresh.append(gpus)
        keys = list(map(_NODE_AND_GPU, chain.from_iterable(fresh)))
        if not (all(layout.valid for layout in known) and self.gpu_keys.issuperset(keys)):
            return False
        # GPUs as numbers: a set of a layout's numbers is kept, where one of (node, index) pairs
        # would be hashed anew each round (2,000 GPUs held: 53 against 232 us)
        first = self.first_slot
        slots = [first[node] + gpu for node, gpu in keys]
        return len(set(slots).union(*(layout.slots for layout in known))) == len(slots) + sum(
            len(layout.keys) for layout in known)

    def layout(self, gpus: tuple[GpuRef, ...]) -> GpuLayout:
        """Where `gpus` lie on this cluster (GpuLayout), remembered by the tuple's identity: a
        replay hands a running job the same tuple round after round, and parsing, valuing,
        decoding and verifying a round each read where it lies (a tuple is held while its
        layout is, so its id is not reused)."""
        if type(gpus) is not tuple:
            return GpuLayout(self, tuple(gpus))
        if (known := self._known_layout(gpus)) is not None:
            return known
        memo = self._layouts
        if len(memo) >= LAYOUT_MEMO_TUPLES:
            memo.clear()
        layout = GpuLayout(self, gpus)
        memo[id(gpus)] = (gpus, layout)
        return layout

    def unvouched(self, held: Iterable[tuple[GpuRef, ...]]) -> list[tuple[GpuRef, ...]]:
        """The tuples of `held` (one per job) that no remembered layout vouches for: one of this very
        tuple, valid and plain (GpuLayout). A parser reads only their GPUs one by one: a replay's
        stayers hold the tuples they held last round, laid out then."""
        return [gpus for gpus in held
                if gpus and ((layout := self._known_layout(gpus)) is None or not (layout.valid and layout.plain))]

    def _known_layout(self, gpus: tuple[GpuRef, ...]) -> GpuLayout | None:
        """The layout remembered for this very tuple (Cluster.layout), or None."""
        hit = self._layouts.get(id(gpus))
        return hit[1] if hit is not None and hit[0] is gpus else None

    @cached_property
    def first_slot(self) -> dict[str, int]:
        """Node id -> the number of its GPU 0, every GPU numbered in node order (GpuLayout.slots)."""
        firsts = [0]
        for n in self.nodes[:-1]:
            firsts.append(firsts[-1] + n.gpus)
        return {n.id: first for n, first in zip(self.nodes, firsts)}

    @cached_property
    def _layouts(self) -> dict[int, tuple[tuple[GpuRef, ...], GpuLayout]]:
        """id(tuple) -> (the tuple, its GpuLayout): Cluster.layout's memo."""
        return {}

    @cached_property
    def has_variability(self) -> bool:
        """Whether some node lists slowdown factors (PAL's per-GPU variability)."""
        return any(n.slowdown for n in self.nodes)

    @cached_property
    def derived(self) -> dict[Hashable, Any]:
        """What is computed from this cluster alone, kept with it by its maker's key: that it
        passed its checks (io.parse), its node groups (formulations.options), the joint round's
        tiers, pools and option templates. A replay hands every round the same Cluster, and
        these were a good part of each of its rounds; a Cluster is a value, so they hold as
        long as it lives."""
        return {}

    def node_refs(self, k: int) -> tuple[GpuRef, ...]:
        """Node k's GpuRefs by GPU index (_node_gpu_refs)."""
        node = self.nodes[k]
        return _node_gpu_refs(node.id, node.gpus)

    def derive(self, key: Hashable, make: Callable[[], _T]) -> _T:
        """`derived[key]`, made by `make()` the first time it is asked for."""
        if key not in self.derived:
            self.derived[key] = make()
        return self.derived[key]


@lru_cache(maxsize=1 << 14)  # the nodes of a 65,536-GPU cluster of 4-GPU nodes
def _node_gpu_refs(node_id: str, gpus: int) -> tuple[GpuRef, ...]:
    """The GpuRefs of a node's GPUs by index, made the first time they are asked for and shared
    by every allocation after, of any Cluster with that node (a GpuRef is a value): a GpuRef is a
    frozen dataclass, ~0.5 us to make, a round of 100 jobs made ~200 of them, and a scheduler
    that builds its Cluster anew each round made them anew each round."""
    return tuple(GpuRef(node_id, i) for i in range(gpus))


LAYOUT_MEMO_TUPLES = 1 << 14  # the memo starts over when full (a replay holds a few hundred jobs at a time)


class GpuLayout:
    """Where a tuple of GPUs lies on a cluster (Cluster.layout): valid and counts at once, the rest when first read.

    keys: each GPU as (node id, index), in the tuple's order. valid: every GPU exists and none
    comes twice; where not, the parts below are empty. counts: node index -> how many GPUs are
    held there, nodes in the order the tuple first names them; per_node: node index -> the GPU
    indices held there (the same order); rest: node index -> the GPU indices there it does not
    hold. slots: every GPU as its number in the cluster (Cluster.first_slot), for disjointness
    checks. in_order: the tuple is sorted (GpuRef's order), as a job's allocation is. Shared by
    every reader: never changed."""

    def __init__(self, cluster: Cluster, gpus: tuple[GpuRef, ...]):
        # not the cluster itself: its memo holds this layout
        self._index, self._first, self._nodes, self._gpus = cluster.node_index, cluster.first_slot, cluster.nodes, gpus
        self.keys: list[tuple[str, int]] = list(map(_NODE_AND_GPU, gpus))
        self.valid = len(set(self.keys)) == len(self.keys) and cluster.gpu_keys.issuperset(self.keys)
        counts: dict[int, int] = {}
        if self.valid:  # read for every stayer of every round (a round's options): made at once
            for node, _ in self.keys:
                k = self._index[node]
                counts[k] = counts.get(k, 0) + 1
        self.counts: Mapping[int, int] = counts

    @cached_property
    def per_node(self) -> Mapping[int, set[int]]:
        """Node index -> the GPU indices held there."""
        per_node: dict[int, set[int]] = {}
        if self.valid:
            for node, gpu in self.keys:
                per_node.setdefault(self._index[node], set()).add(gpu)
        return per_node

    @cached_property
    def rest(self) -> Mapping[int, tuple[int, ...]]:
        """Node index -> that node's GPU indices not held, in order (what a free node keeps free
        once these are taken: a stayer's, every round)."""
        return {k: tuple(i for i in range(self._nodes[k].gpus) if i not in ids) for k, ids in self.per_node.items()}

    @cached_property
    def slots(self) -> frozenset[int]:
        """Every GPU's number in the cluster."""
        return frozenset(self._first[node] + gpu for node, gpu in self.keys) if self.valid else frozenset()

    @cached_property
    def in_order(self) -> bool:
        """Whether the tuple is sorted in GpuRef's order."""
        return self.keys == sorted(self.keys)

    @cached_property
    def plain(self) -> bool:
        """Whether every GPU is a GpuRef of a str node id and an int index, the types exactly (the
        form in which the parser keeps a round's GPUs as given)."""
        return all(type(ref) is GpuRef and type(ref.node) is str and type(ref.gpu) is int for ref in self._gpus)


@dataclass(frozen=True, order=True)
class GpuRef:
    """One concrete GPU: the node's id and the GPU's index on that node."""

    node: str
    gpu: int

    @property
    def key(self) -> str:
        """The GPU's id as one string, ``node/gpu`` (``n3/1``): the one format of GPU ids."""
        return f"{self.node}/{self.gpu}"


_NODE_AND_GPU = attrgetter("node", "gpu")  # a GpuRef as (node, gpu), read in C


@dataclass(frozen=True)
class ThroughputParams:
    """Pollux's 7-parameter step-time model of one job on one GPU type (schedlab.models.throughput).

    Attributes
    ----------
    alpha_c, beta_c : float
        Compute time of one micro-step, alpha_c + beta_c * micro-batch: seconds, seconds per example.
    alpha_n, beta_n : float
        All-reduce across nodes, alpha_n + beta_n * max(GPUs - 2, 0): seconds, seconds per GPU.
    alpha_r, beta_r : float
        The same within one node (PCIe or NVLink).
    gamma : float
        Overlap of compute and sync, >= 1: (T_c^gamma + T_n^gamma)^(1/gamma); 1 is none.
    """

    alpha_c: float
    beta_c: float
    alpha_n: float
    beta_n: float
    alpha_r: float
    beta_r: float
    gamma: float

    def projected(self, speed_ratio: float) -> ThroughputParams:
        """These parameters on a GPU type `speed_ratio` times as fast: the compute terms
        (alpha_c, beta_c) divided by the ratio, the sync terms kept (the network does not
        change with the GPU).

        Examples
        --------
        >>> ThroughputParams(0.2, 0.01, 0.3, 0.02, 0.1, 0.001, 1.5).projected(2.0).alpha_c
        0.1
        """
        return replace(self, alpha_c=self.alpha_c / speed_ratio, beta_c=self.beta_c / speed_ratio)


@dataclass(frozen=True)
class GradStats:
    """Gradient statistics at the job's initial batch size M0 (Pollux's GradParams).

    sqr = |E[g]|^2, the squared norm of the true gradient; var = tr(Sigma) / M0, the variance
    of the gradient estimated from one batch of M0 examples (Sigma: the per-example gradient
    covariance). Their ratio gives the gradient noise scale, M0 var / sqr examples
    (models.efficiency).
    """

    sqr: float
    var: float


@dataclass(frozen=True)
class BatchLimits:
    """Batch-size bounds of a job, in examples.

    init_bsz: the initial (reference) total batch M0, at which its gradient statistics and
    training length are measured; max_bsz: the largest total batch it trains at;
    min_local_bsz, max_local_bsz: the per-GPU micro-batch range (the upper end what fits in
    one GPU's memory; larger batches accumulate gradients).
    """

    init_bsz: int
    max_bsz: int
    min_local_bsz: int
    max_local_bsz: int

    def with_local(self, min_local_bsz: int | None = None, max_local_bsz: int | None = None) -> BatchLimits:
        """These limits with the per-GPU micro-batch range replaced where given (a GPU type's own
        range, JobSpec.batch_by_type)."""
        return replace(self, min_local_bsz=self.min_local_bsz if min_local_bsz is None else min_local_bsz,
                       max_local_bsz=self.max_local_bsz if max_local_bsz is None else max_local_bsz)


@dataclass(frozen=True)
class LayerGroup:
    """A contiguous block of layers: forward and backward cost of one example (relative units,
    e.g. MACs) and its parameter count. Groups are listed input-first; freezing k groups
    freezes the first k."""

    name: str
    forward: float
    backward: float
    params: float


@dataclass(frozen=True)
class FreezePenalty:
    """Our frozen-penalty model (see models.freezing): the share of a step's worth lost with a
    fraction phi of the backward compute frozen at training progress q,
    pi(phi, q) = 1 - exp(-scale * phi^exponent * (1 - q)^decay)."""

    scale: float = 14.4
    exponent: float = 3.0
    decay: float = 2.0


@dataclass(frozen=True)
class FreezeSpec:
    """A job that opts in to layer freezing (IceFrog-style).

    progress: fraction of training done, in [0, 1]. total_steps: training length in steps at
    the initial batch (Pollux's progress unit), so a round's progress is goodput * round_s /
    (init_bsz * total_steps). budget_left: accuracy penalty the job still accepts (the same
    unit as the penalty, e.g. 0.03 = 3 %). Levels min_frozen..max_frozen are allowed.
    """

    groups: tuple[LayerGroup, ...]
    progress: float
    total_steps: float
    budget_left: float
    min_frozen: int = 0
    max_frozen: int | None = None  # None: all but the last group
    penalty: FreezePenalty = FreezePenalty()

    @property
    def top_level(self) -> int:
        """The highest freeze level allowed: max_frozen, else all groups but the last."""
        return len(self.groups) - 1 if self.max_frozen is None else self.max_frozen


@dataclass(frozen=True)
class JobSpec:
    """One job as the round model sees it.

    `throughput` maps GPU type -> fitted parameters; a job can only run on the types it has
    parameters for. `current_gpus` is empty for a job that is not running.

    The last three fields are hints for policies other than the goodput model, which ignores
    them: the GPU count and total batch the user asked for (gang-scheduling baselines; ONES
    scales batch linearly from requested_bsz / requested_gpus per GPU), the GPU-seconds the
    job has received so far (least-attained-service), and the optimizer steps it has left at
    its fixed batch, or at its initial batch when none is fixed (remaining-time policies such as
    Optimus and ONES; None = unknown). `freezing` is set for a job that opts in to layer
    freezing (formulations.freezing). `app_class` names the variability class of its GPUs'
    slowdown factors (default: from the application, APP_CLASS).

    A mixed cluster's rules: `batch_by_type` maps a GPU type to the job's batch limits there
    (its own micro-batch range, as a GPU's memory bounds it; `batch_on`), `projected_types`
    names the types whose `throughput` entry was projected from another type's
    (Cluster.projections), and a `pinned` job keeps its current GPUs this round (a checkpoint or
    restore in progress): it must be running, and its only option is to stay.
    """

    id: str
    throughput: dict[str, ThroughputParams]
    grad_stats: GradStats
    batch: BatchLimits
    min_gpus: int = 1
    max_gpus: int = 1
    current_gpus: tuple[GpuRef, ...] = ()
    age_s: float = 0.0
    num_restarts: int = 0
    fixed_bsz: int | None = None
    restart_cost_s: float | None = None
    application: str | None = None
    requested_gpus: int | None = None
    requested_bsz: int | None = None
    attained_service_gpu_s: float = 0.0
    remaining_steps: float | None = None
    freezing: FreezeSpec | None = None
    app_class: str | None = None
    batch_by_type: Mapping[str, BatchLimits] = field(default_factory=dict)
    pinned: bool = False
    projected_types: tuple[str, ...] = ()

    def batch_on(self, gpu_type: str) -> BatchLimits:
        """The job's batch limits on GPU type `gpu_type`: its batch_by_type entry, else `batch`.
        Every valuation and check of a batch on a type reads them here."""
        return self.batch_by_type.get(gpu_type, self.batch)

    def projected_on(self, gpu_type: str) -> bool:
        """Whether the job's parameters on `gpu_type` were projected from another type's."""
        return gpu_type in self.projected_types

    @property
    def running(self) -> bool:
        """Whether the job holds GPUs now."""
        return bool(self.current_gpus)

    @property
    def gang_gpus(self) -> int:
        """The GPUs a gang-scheduled job runs on: requested_gpus, else min_gpus."""
        return self.requested_gpus or self.min_gpus

    @property
    def submitted_bsz(self) -> int:
        """The total batch the job was submitted with, at which policies that do not adapt the
        batch train it: fixed_bsz, else requested_bsz (the user's ask), else batch.init_bsz."""
        return self.fixed_bsz or self.requested_bsz or self.batch.init_bsz

    def restarted_on(self, gpus: tuple[GpuRef, ...]) -> bool:
        """Whether running on `gpus` restarts the job: it runs now, on other GPUs."""
        return self.running and set(gpus) != set(self.current_gpus)

    @property
    def variability_class(self) -> str:
        """The class whose slowdown factors apply: app_class, else the application's (APP_CLASS)."""
        return variability_class(self.application, self.app_class)


@dataclass(frozen=True)
class Settings:
    """Policy settings of a round.

    p: exponent of the power mean of speedups (1 = sum, -1 = Pollux, -0.5 = Sia,
       -inf = max-min). restart_cost_s: Pollux's S in the restart factor
       max(age - S * restarts, 0) / (age + S). unallocated_penalty: lambda, leaving a job
       unallocated is worth lambda times less than its worst option (Sia's 1.1).
    formulation: the round model, by name (schedlab.formulations.FORMULATIONS): goodput,
       joint or placement. tier_tolerance: slowdown factors of one class within this relative
       distance are one tier, valued at its slowest (joint).
    solver: by name (solvers.registry.SOLVERS); portfolio runs highs, then races highs's full
       MIP against cpsat (solvers.portfolio).
    lp_first: highs solves the LP relaxation first and a MIP over its fractional jobs only
       (solvers.highs_direct); False runs the full MIP.
    partitions: split the round into this many parts solved in parallel (schedlab.partition,
       POP); 0 chooses from the round's size (a part per the formulation's jobs_per_part: 10,000
       jobs for goodput, 8,000 for joint), 1 never splits.
    time_limit_s: wall-clock seconds for the whole round, building the model included.
    mip_gap: relative optimality gap at which a solver stops; status "optimal" means within it.
    seed: the solvers' random seed.
    solver_options: (name, value) pairs handed to the solver in its own option names, after
       schedlab's (so they win): HiGHS options for highs and appsi_highs, CP-SAT parameters for
       cpsat, the program's options for cbc, glpk, ... (portfolio, which runs two solvers,
       takes none).
    """

    formulation: str = "goodput"
    p: float = -1.0
    restart_cost_s: float = 30.0
    unallocated_penalty: float = 1.1
    solver: str = "portfolio"
    time_limit_s: float = 10.0
    mip_gap: float = 1e-4
    seed: int = 0
    tier_tolerance: float = 0.05
    lp_first: bool = True
    partitions: int = 0
    solver_options: tuple[tuple[str, bool | int | float | str], ...] = ()

    @property
    def max_min(self) -> bool:
        """Whether p = -inf: maximize the smallest speedup (ties broken by the total)."""
        return math.isinf(self.p) and self.p < 0


@dataclass(frozen=True)
class RoundInput:
    """One round: the cluster, its jobs, the policy's settings, and the round's length (which
    turns a freezing job's progress rate into the penalty it spends this round)."""

    cluster: Cluster
    jobs: tuple[JobSpec, ...]
    settings: Settings = field(default_factory=Settings)
    round_s: float = 60.0

    @cached_property
    def fair_share_gpus(self) -> int:
        """A job's fair share of the cluster, ceil(total GPUs / jobs): the GPU count each job's
        speedup is measured against (Pollux, Sia)."""
        return math.ceil(self.cluster.total_gpus / max(len(self.jobs), 1))


@dataclass(frozen=True)
class JobAllocation:
    """What one job gets this round; `gpus` is empty when it is left unallocated."""

    job_id: str
    gpus: tuple[GpuRef, ...] = ()
    total_bsz: int = 0
    local_bsz: int = 0
    accum_steps: int = 0
    goodput: float = 0.0
    speedup: float = 0.0
    restarted: bool = False
    frozen_groups: int = 0
    freeze_penalty: float = 0.0  # accuracy penalty this round spends (freezing jobs)
    projected: bool = False  # its GPUs are of a type its parameters were projected for

    @staticmethod
    @lru_cache(maxsize=1 << 16)
    def unallocated(job_id: str) -> JobAllocation:
        """Job `job_id` left without GPUs this round: one object per id, made once (a frozen
        dataclass is ~1 us to make, and a busy round leaves dozens of jobs out, round after round)."""
        return JobAllocation(job_id)

    @property
    def num_gpus(self) -> int:
        """GPUs held (0: unallocated)."""
        return len(self.gpus)

    @property
    def num_nodes(self) -> int:
        """Nodes the GPUs are on."""
        return len({g.node for g in self.gpus})


class Status(StrEnum):
    """How a round (or one solver's search) ended; the values are the JSON's."""

    OPTIMAL = "optimal"  # proven within settings.mip_gap
    TIME_LIMIT = "time_limit"  # feasible, not proven
    FAILED = "failed"  # a solver's search with no usable point (never a round's status)
    FALLBACK = "fallback"  # the greedy answer: the solver had none that decoded and verified
    PARTITIONED = "partitioned"  # each part solved on its own (schedlab.partition)
    HEURISTIC = "heuristic"  # a policy that does not prove optimality (ones, greedy placements)

    def __repr__(self) -> str:  # printed in dicts and tables as the JSON string it stands for
        return repr(self.value)


@dataclass(frozen=True)
class RoundResult:
    """The answer of a round (status: Status). build_s counts everything before the solver
    searches; options_s is its part spent building the formulation's model (for goodput:
    enumerating and valuing the options). `bound` is an upper bound on the objective: the
    solver's, else the LP relaxation of the round's model (of a partitioned round, the sum of
    its parts'); NaN only for a heuristic policy's answer and where even the LP relaxation did
    not finish within the time limit, `bound_timed_out`. `objective` is NaN, with the bound, where
    the round's model itself was not built within the limit (status fallback: the goodput round's
    greedy answered, its message says why)."""

    allocations: tuple[JobAllocation, ...]
    status: Status
    solver: str
    objective: float
    bound: float
    gap: float
    build_s: float
    solve_s: float
    verified: bool
    message: str = ""
    options_s: float = 0.0
    bound_timed_out: bool = False

    def allocation(self, job_id: str) -> JobAllocation:
        """The allocation of job `job_id` (KeyError if the round has no such job)."""
        for a in self.allocations:
            if a.job_id == job_id:
                return a
        raise KeyError(job_id)
