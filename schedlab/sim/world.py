"""The simulated world a replay runs in: its configuration (ReplayConfig, WORLDS) and its physics.

A replay's world is data (ReplayConfig): the cluster (clusters.ClusterSpec: shape, racks and
links, PAL's flat penalty, GPU variability; clusters.make_cluster) and the replay's semantics:
round length, restart delay, horizon, when the first decision is taken, whether a job of fixed
work ends with its round, the throughput model policies see, layer-freezing opt-ins and
calibrated applications. WORLDS names the shipped ones.

`World` turns the cluster into the physics the jobs feel. A job on GPUs S of its class a runs,
after PAL (Jain et al. SC'24), at the speed of its slowest GPU: tau = max_{g in S} sf_ga, the
true factor (not the tiers a scheduler sees). Its spread over the topology costs sync time:
inter-node sync x B_ref / B with B the bottleneck bandwidth joining its nodes in the cluster
graph and B_ref the node link bandwidth (ours, as the joint formulation prices it), and the
whole step x the topology's across_node_factor when it spans nodes (PAL's flat penalty).

Several GPU types: the applications' tables were measured on the T4 (profiles.POLLUX_GPU_TYPE);
on another type a job's compute runs at the application's speed ratio rho to the T4
(models.type_speeds, derived from Gavel's table), so tau is divided by rho, the slowest
rho of its GPUs' types (one job's GPUs are of one type, but a type-blind policy's need not be).
A world's every pool is of the T4 or of a type with a ratio (ReplayConfig checks it).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from functools import cached_property
from typing import Any

import networkx as nx

from schedlab.clusters import ClusterSpec, NodePool, pools_text
from schedlab.errors import ConfigError
from schedlab.models.freezing import DEFAULT_BUDGET
from schedlab.models.profiles import POLLUX_GPU_TYPE
from schedlab.models.throughput import MeasuredTable
from schedlab.models.type_speeds import derived_types, speed_ratio
from schedlab.sim.view import THROUGHPUT_MODELS
from schedlab.state import Cluster, FreezePenalty, GpuRef, Topology
from schedlab.topology import cluster_graph, spread_gbps

__all__ = ["GAVEL_WORLD", "PAL_WORLD", "WORLDS", "ReplayConfig", "World"]


@dataclass(frozen=True)
class World:
    """The cluster twice: as the policies see it and as it runs."""

    seen: Cluster  # what goes into every round
    truth: Cluster  # how the GPUs really run
    _nodes: dict = field(init=False, repr=False, compare=False)
    _factors: dict = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "_nodes", {n.id: n for n in self.truth.nodes})
        object.__setattr__(self, "_factors", {})

    @cached_property
    def graph(self) -> nx.Graph:
        """The true cluster as a graph, spine - rack - node - GPU, with link bandwidths (topology.cluster_graph)."""
        return cluster_graph(self.truth)

    @property
    def plain(self) -> bool:
        """No variability, no topology, only T4s: every placement runs as the measured tables say."""
        return (self.truth.topology is None and not self.truth.has_variability
                and self.truth.gpu_types <= {POLLUX_GPU_TYPE})

    def slowest(self, gpus: tuple[GpuRef, ...], app_class: str) -> float:
        """tau: the true slowdown of the slowest GPU for this class."""
        return max(self._nodes[g.node].gpu_slowdown(g.gpu, app_class) for g in gpus)

    def type_speed(self, gpus: tuple[GpuRef, ...], application: str) -> float:
        """rho: the application's speed on the slowest type of these GPUs, relative to the T4 (1 on T4s)."""
        if self.truth.gpu_types <= {POLLUX_GPU_TYPE}:  # a cluster of T4s: no GPU to look at
            return 1.0
        types = {self._nodes[g.node].gpu_type for g in gpus} - {POLLUX_GPU_TYPE}
        return min((speed_ratio(application, t) for t in types), default=1.0)

    def compute_factor(self, gpus: tuple[GpuRef, ...], app_class: str, application: str) -> float:
        """tau / rho: how many times its T4 time a micro-step's compute takes on these GPUs."""
        return self.slowest(gpus, app_class) / self.type_speed(gpus, application)

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

    def step_factors(self, gpus: tuple[GpuRef, ...], app_class: str, application: str) -> tuple[float, float, float]:
        """(compute_factor, sync_scale, spread_factor) of a job of `application` (variability class
        `app_class`) on `gpus`, each GPU set's computed once: a running job keeps its GPUs round
        after round, and a spread's bandwidth is a walk over the cluster's graph."""
        key = (gpus, app_class, application)
        if key not in self._factors:
            self._factors[key] = (self.compute_factor(gpus, app_class, application), self.sync_scale(gpus),
                                  self.spread_factor(gpus))
        return self._factors[key]


_SHAPE = ("num_nodes", "gpus_per_node", "gpu_type")  # the single-pool fields node pools set


@dataclass(frozen=True)
class ReplayConfig:
    """A replay's world: its cluster and its semantics (module docstring).

    `with_options` sets fields of either by name, as `schedlab.replay(..., **options)` takes
    them: `WORLDS["pal"].with_options(num_nodes=4, round_s=60.0)`.
    """

    cluster: ClusterSpec = ClusterSpec(gpu_type=POLLUX_GPU_TYPE)
    round_s: float = 60.0
    restart_delay_s: float = 30.0
    throughput_model: str | None = None  # None: the policy's own choice; else a key of view.THROUGHPUT_MODELS
    horizon_s: float = 60 * 86400.0  # stop here and report the jobs still running
    freeze_opt_in: float = 0.0  # fraction of jobs that opt in to layer freezing
    freeze_budget: float = DEFAULT_BUDGET  # each opted-in job's accuracy-penalty budget
    freeze_penalty: FreezePenalty = FreezePenalty()
    freeze_seed: int = 0  # which jobs opt in
    # application -> MeasuredTable from a calibration table (calibrate.table.measured_table):
    # that application's true step times; its gradient statistics stay Pollux's
    calibration: tuple[tuple[str, MeasuredTable], ...] = ()
    # semantics: the first decision (None: one round in, as Pollux's simulator), and whether a
    # job of fixed work is done at the end of the round it finishes in (PAL's simulator)
    first_decision_s: float | None = None
    finish_at_round_end: bool = False
    # how this world's trace loaders read a Sia-Philly trace (traces.sia_philly_jobs): jobs of
    # fixed work, "iterations" or "seconds" of it per trace duration; None: a Pollux workload of
    # the same arrivals
    sia_philly_work: str | None = None

    def __post_init__(self):
        problems = [f"{k} must be > 0" for k in ("round_s", "horizon_s") if not getattr(self, k) > 0]
        if unknown := sorted(set(self.cluster.gpu_types) - set(derived_types())):
            problems.append(f"GPU type {unknown[0]!r} has no true throughput in this world: the applications' tables "
                            f"were measured on {POLLUX_GPU_TYPE!r} and derived to {', '.join(derived_types())} "
                            "(models.type_speeds); use those types")
        if self.first_decision_s is not None and self.first_decision_s < 0:
            problems.append("first_decision_s must be >= 0")
        if not 0.0 <= self.freeze_opt_in <= 1.0:
            problems.append(f"freeze_opt_in {self.freeze_opt_in} must be a fraction in [0, 1]")
        if self.freeze_budget < 0:
            problems.append("freeze_budget must be >= 0")
        if self.restart_delay_s < 0:
            problems.append("restart_delay_s must be >= 0")
        if self.throughput_model is not None and self.throughput_model not in THROUGHPUT_MODELS:
            problems.append(f"throughput_model {self.throughput_model!r}: use {' or '.join(THROUGHPUT_MODELS)}")
        if problems:
            raise ConfigError("replay config: " + "; ".join(problems))

    @property
    def total_gpus(self) -> int:
        """The cluster's GPUs."""
        return self.cluster.total_gpus

    def options(self) -> dict[str, Any]:
        """Every field of the config and of its cluster, by name (the names with_options takes)."""
        own = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "cluster"}
        return {f.name: getattr(self.cluster, f.name) for f in fields(self.cluster)} | own

    def with_options(self, **options: Any) -> ReplayConfig:
        """This config with `options` set, each a field of the config or of its cluster (checked)."""
        names = {f.name for f in fields(self.cluster)}
        unknown = sorted(set(options) - set(self.options()))
        if unknown:
            raise ConfigError(f"unknown replay option {unknown[0]!r}; use one of {', '.join(sorted(self.options()))}")
        cluster = replace(self.cluster, **{k: v for k, v in options.items() if k in names})
        # node pools are the shape: a single-pool field set to other than what they describe is lost
        lost = [k for k in _SHAPE if k in options and cluster.pools and options[k] != getattr(cluster, k)]
        if lost:
            raise ConfigError(f"{lost[0]} {options[lost[0]]!r}: the cluster is node pools ({pools_text(cluster.pools)}), "
                              "which set it; change the pools instead")
        return replace(self, cluster=cluster, **{k: v for k, v in options.items() if k not in names})


# PAL's simulator (Jain et al. SC'24, github.com/hal-uw/blox-pal) as a world: 360 s rounds, no
# restart delay, every GPU at a measured Longhorn GPU's slowest run (policies see its tiers), a job
# spanning nodes 1.7x slower, the first decision at 0 and completions at a round's end. Its traces
# are Sia-Philly jobs of fixed work (traces.sia_philly_jobs); its queue (FIFO, the cut at the first
# job that does not fit) belongs to the placement policies (policies.placement).
PAL_WORLD = ReplayConfig().with_options(
    round_s=360.0, restart_delay_s=0.0, horizon_s=120 * 86400.0, across_node_factor=1.7, variability="measured",
    first_decision_s=0.0, finish_at_round_end=True, sia_philly_work="iterations")
# Gavel's simulator (Narayanan et al. OSDI'20, stanford-futuredata/gavel) as a world: its traces' rigid
# jobs (sim.gavel) on 36 V100 + 36 P100 + 36 K80 in servers of 4, 360 s rounds, no restart delay, the
# first decision at 0.
GAVEL_WORLD = ReplayConfig(cluster=ClusterSpec(pools=tuple(NodePool(t, 9, 4) for t in ("v100", "p100", "k80"))),
                           round_s=360.0, restart_delay_s=0.0, first_decision_s=0.0)
WORLDS: dict[str, ReplayConfig] = {
    "pollux": ReplayConfig(),  # the Pollux artifact's simulator
    "pal": PAL_WORLD,
    # the Pollux world on PAL's measured variability and 4 racks with 2:1 oversubscribed uplinks
    "variability": ReplayConfig().with_options(racks=4, uplink_gbps=50.0, variability="measured"),
    "gavel": GAVEL_WORLD,
}
