r"""Candidate configurations of each job and their value: shared by every goodput-style model.

**Shapes** (after Sia, SOSP'23). Nodes are grouped by (GPU type, GPUs per node $G$). In a group
a job may take

- one node, $d$ GPUs, with $d$ in the group's divisibility chain
  $L(G) = \{1, 2, 4, \dots, 2^k, G\}$ (powers of two dividing $G$, then $G$): every size divides
  the next;
- $n \ge 2$ whole nodes ($n G$ GPUs), $n \in \{2, 3, 4, 6, 8, 12, 16, 24, \dots\}$ and the
  group's size (steps of at most 1.5x: $O(\log N)$ options instead of Sia's $O(N)$, which at
  2,048 GPUs made building and solving the round ~10x slower for speedups that differ by
  < 1.5x);
- for a running job, also its exact current GPUs (the "stay" option).

A job takes groups of the GPU types it has throughput parameters for, fitted or projected from
another type's by the round's speed ratios (state.Cluster.projections); a pinned job
(JobSpec.pinned) has its stay option only, which the round model fixes (options.pinned_stays).

Chain sizes make the counting constraints of the round model exact (see goodput.py): any set
of chain-sized items whose per-level counts fit can be packed onto concrete nodes.

**Value.** For option $c$ of job $j$ with best-batch goodput $g_{jc}$
(models.efficiency.best_batch, within the job's batch limits on the option's GPU type:
JobSpec.batch_on):

- speedup: $s_{jc} = g_{jc} / g_j(\text{fair share})$, fair share
  $= \lceil \text{total GPUs} / \text{jobs} \rceil$ GPUs, clipped to the job's [min, max], on
  fewest nodes of the largest group of a GPU type the job can use (fair_shapes)
- restart: $s'_{jc} = s_{jc} \, f_j$ for a running job's non-stay options (it moves), where
  $f_j = \max(\mathit{age}_j - S \cdot \mathit{restarts}_j, 0) / (\mathit{age}_j + S)$
  (Pollux's factor)
- utility: $U(s) = s^p$ ($p > 0$), $\log s$ ($p = 0$), $-s^p$ ($p < 0$); max-min uses
  $U(s) = s$
- unallocated: $U0_j = U(\mathit{smin}_j) - (\lambda - 1) \, |U(\mathit{smin}_j)|$,
  $\mathit{smin}_j = \min_c s_{jc}$

$U0$ makes leaving a job out $\lambda$ times worse than its worst option; with Sia's
normalization (smallest option = 1) and $p < 0$ this is exactly Sia's $\lambda_n = 1.1$.
Options whose goodput or penalized speedup is 0 are dropped (a job younger than
$S \cdot \mathit{restarts}$ cannot move).

**Normalization across GPU types.** The speedup is normalized per job: each job's goodput is
divided by its own goodput at its own fair share, so every job is at 1 on its fair share
whatever its model, its types and their speeds, and the p-mean weighs what each job gains over
its own reference, never one job's absolute rate against another's. The reference lies on the
largest group of a type the job can use (the first by type name among equals), not on its
fastest, so on a faster type a job's speedup exceeds 1 by what that type gives it, and the
p-mean puts on a fast type the jobs that gain most there (Sia's heterogeneity-aware goodput).
Sia's own reference is each job's smallest option (its minimum goodput = 1): also per job, it
weighs jobs against each other by another reference. On a round of one type the fair share is
Pollux's.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import cache, cached_property
from operator import attrgetter
from typing import Any, Protocol

import numpy as np

from schedlab.errors import InputError
from schedlab.models.efficiency import best_batch_shared
from schedlab.models.freezing import scaled_params
from schedlab.state import BatchLimits, Cluster, GpuRef, GradStats, JobAllocation, JobSpec, RoundInput, Settings, ThroughputParams

__all__ = ["NodeGroup", "OptionColumns", "OptionCounts", "OptionSet", "chain_levels", "dense_ids", "distinct_rows",
           "distinct_values",
           "enumerate_options", "fair_shapes", "field_values", "group_shapes", "job_allocations",
           "model_key", "model_table", "multi_node_counts", "placeable_gpus",
           "node_groups", "option_best_batch", "option_goodput", "pinned_stays", "prune_dominated", "restart_cost_s",
           "restart_factor", "restart_factors", "stay_options", "unallocated_utilities", "utility"]


@cache  # asked for every node group, row and level of a round
def chain_levels(gpus_per_node: int) -> tuple[int, ...]:
    """Powers of two dividing G, then G: a divisibility chain of single-node sizes.

    Examples
    --------
    >>> chain_levels(8), chain_levels(6)
    ((1, 2, 4, 8), (1, 2, 6))
    """
    levels = []
    d = 1
    while d < gpus_per_node and gpus_per_node % d == 0:
        levels.append(d)
        d *= 2
    return tuple(levels) + (gpus_per_node,)


@dataclass(frozen=True)
class NodeGroup:
    """Interchangeable nodes: same GPU type and size. `nodes` are indices into the cluster."""

    gpu_type: str
    gpus_per_node: int
    nodes: tuple[int, ...]

    @property
    def levels(self) -> tuple[int, ...]:
        """L(G), the group's single-node sizes (`chain_levels`)."""
        return chain_levels(self.gpus_per_node)


def node_groups(round_input: RoundInput) -> tuple[NodeGroup, ...]:
    """The round's nodes with GPUs, grouped by (GPU type, GPUs per node), in the order of that
    key; found once per cluster (Cluster.derive)."""
    return round_input.cluster.derive("formulations.options: node groups", lambda: _node_groups(round_input.cluster))


def _node_groups(cluster: Cluster) -> tuple[NodeGroup, ...]:
    by_key: dict[tuple[str, int], list[int]] = {}
    for k, node in enumerate(cluster.nodes):
        if node.gpus > 0:
            by_key.setdefault((node.gpu_type, node.gpus), []).append(k)
    return tuple(NodeGroup(t, g, tuple(ks)) for (t, g), ks in sorted(by_key.items()))


class OptionCounts:
    """The counts every option set reports (OptionSet's, joint's JointOptions): its options (the
    model's x columns) and the round's jobs, with options or without."""

    job: np.ndarray
    round_input: RoundInput

    @property
    def num_options(self) -> int:
        """The options (the model's x columns)."""
        return len(self.job)

    @property
    def num_jobs(self) -> int:
        """The round's jobs, with options or without."""
        return len(self.round_input.jobs)


@dataclass(frozen=True)
class OptionSet(OptionCounts):
    """All candidate configurations of a round, one row per option (columnar arrays).

    group[c] is -1 for a stay option. stay_nodes[j] maps node index -> GPUs job j holds now,
    for jobs that have a stay option (one per job).
    U0[j] is the value of leaving job j unallocated.
    """

    round_input: RoundInput
    groups: tuple[NodeGroup, ...]
    job: np.ndarray
    group: np.ndarray
    num_nodes: np.ndarray
    num_gpus: np.ndarray
    goodput: np.ndarray
    speedup: np.ndarray
    penalized_speedup: np.ndarray
    utility: np.ndarray
    local_bsz: np.ndarray
    accum_steps: np.ndarray
    U0: np.ndarray
    stay_nodes: dict[int, Mapping[int, int]]
    frozen_groups: np.ndarray | None = None  # freeze level of each option (formulations.freezing)
    freeze_penalty: np.ndarray | None = None  # accuracy penalty each option spends this round

    @cached_property
    def stay(self) -> np.ndarray:
        """Mask of the stay options (group -1)."""
        return self.group < 0

    @cached_property
    def item_size(self) -> np.ndarray:
        """z_c: GPUs per node of each new option, its GPUs on one node or the group's G on whole
        nodes (0 for stay options); read by the model's rows and by decoding."""
        G = np.array([grp.gpus_per_node for grp in self.groups] + [0], dtype=int)[self.group]  # group -1: 0
        return np.where(self.num_nodes == 1, self.num_gpus, G) * (self.group >= 0)

    def stay_option(self, j: int) -> int:
        """Index of job j's stay option."""
        return self._stay_options[j]

    @cached_property
    def _stay_options(self) -> dict[int, int]:
        """Job -> its stay option (a scan per job was quadratic: 0.12 s a round at 8,000 jobs)."""
        return stay_options(self.job, self.stay)

    def revalue(self, which: np.ndarray, compute: np.ndarray, sync: np.ndarray):
        """The best batch of options `which` with their compute and sync times scaled by
        `compute[i]` and `sync[i]` (e.g. layers frozen: models.freezing.scaled_params)."""
        return option_best_batch(self, which, compute, sync)

    def undominated(self, util: np.ndarray) -> np.ndarray:
        """Mask of the options not dominated in their (job, group) at utilities `util` (`prune_dominated`)."""
        return prune_dominated(self.job, self.group, self.num_gpus, util)

    def subset(self, pick: np.ndarray) -> OptionSet:
        """Options `pick` (indices), with the stay shapes of the jobs whose stay option is kept."""
        kept = set(self.job[pick[self.stay[pick]]].tolist())
        return replace(self, job=self.job[pick], group=self.group[pick], num_nodes=self.num_nodes[pick],
                       num_gpus=self.num_gpus[pick], goodput=self.goodput[pick], speedup=self.speedup[pick],
                       penalized_speedup=self.penalized_speedup[pick], utility=self.utility[pick],
                       local_bsz=self.local_bsz[pick], accum_steps=self.accum_steps[pick],
                       stay_nodes={j: c for j, c in self.stay_nodes.items() if j in kept})


class OptionColumns(Protocol):
    """What the objective reads of an option set, the goodput model's (OptionSet) or the joint
    model's: every option's job, utility and penalized speedup, and each job's U0."""

    @property
    def round_input(self) -> RoundInput:
        """The round."""

    @property
    def job(self) -> np.ndarray:
        """Each option's job (index into round_input.jobs)."""

    @property
    def utility(self) -> np.ndarray:
        """u_c, each option's utility."""

    @property
    def penalized_speedup(self) -> np.ndarray:
        """s'_c, each option's speedup after the restart factor."""

    @property
    def U0(self) -> np.ndarray:
        """U0_j, each job's utility when unallocated."""

    @property
    def num_jobs(self) -> int:
        """The round's jobs."""

    @property
    def num_options(self) -> int:
        """The options."""


def stay_options(job: np.ndarray, is_stay: np.ndarray) -> dict[int, int]:
    """{job: index of its stay option} over an option set's columns."""
    stays = np.flatnonzero(is_stay)
    return dict(zip(job[stays].tolist(), stays.tolist()))


class _StayColumns(Protocol):
    """An option set that knows each job's stay option (OptionSet, the joint model's options)."""

    @property
    def round_input(self) -> RoundInput:
        """The round."""

    def stay_option(self, j: int) -> int:
        """Index of job j's stay option (KeyError: it has none)."""


def pinned_stays(opts: _StayColumns) -> np.ndarray:
    """(pin): the stay options of the pinned jobs, the columns fixed to 1 (a pinned job's only
    option is its stay, and it is never left unallocated).

    Raises InputError naming each pinned job whose stay is no option: its current GPUs give it
    no goodput within its batch limits there, or staying would overspend its freezing budget.
    """
    jobs = opts.round_input.jobs
    out, lost = [], []
    for j, job in enumerate(jobs):
        if job.pinned:
            try:
                out.append(opts.stay_option(j))
            except KeyError:
                lost.append(f"jobs[{j}].pinned: job {job.id!r} cannot run on the GPUs it holds (no goodput within its "
                            "batch limits on them, or over its freezing budget); unpin it or change its limits")
    if lost:
        raise InputError(lost)
    return np.array(out, dtype=int)


def job_allocations(opts, picked: np.ndarray, gpus_of: dict[int, tuple[GpuRef, ...]]) -> tuple[JobAllocation, ...]:
    """Every job's allocation from its chosen option (picked) and that option's concrete GPUs;
    `opts` is an option set (OptionSet, or the joint model's options). A job given back its own
    current GPUs (the very tuple) did not restart."""
    picked = np.asarray(picked, dtype=int)
    r, local, accum = (a[picked].tolist() for a in (opts.num_gpus, opts.local_bsz, opts.accum_steps))
    goodput, speedup = opts.goodput[picked].tolist(), opts.speedup[picked].tolist()
    cluster = opts.round_input.cluster
    nodes, node_index = cluster.nodes, cluster.node_index
    frozen = opts.frozen_groups[picked].tolist() if opts.frozen_groups is not None else [0] * len(picked)
    penalty = opts.freeze_penalty[picked].tolist() if opts.freeze_penalty is not None else [0.0] * len(picked)
    row_of = dict(zip(opts.job[picked].tolist(), range(len(picked))))
    columns = picked.tolist()
    out = []
    for j, job in enumerate(opts.round_input.jobs):
        i = row_of.get(j)
        if i is None:
            out.append(JobAllocation.unallocated(job.id))
            continue
        given = gpus_of[columns[i]]
        # a stayer's own tuple, where already in order: its layout is known (Cluster.layout)
        gpus = given if given is job.current_gpus and cluster.layout(given).in_order else tuple(sorted(given, key=_GPU_ORDER))
        out.append(JobAllocation(
            job_id=job.id, gpus=gpus, total_bsz=r[i] * local[i] * (accum[i] + 1), local_bsz=local[i],
            accum_steps=accum[i], goodput=goodput[i], speedup=speedup[i],
            restarted=given is not job.current_gpus and job.restarted_on(gpus),
            frozen_groups=frozen[i], freeze_penalty=penalty[i],
            projected=bool(job.projected_types) and job.projected_on(nodes[node_index[gpus[0].node]].gpu_type),
        ))
    return tuple(out)


_GPU_ORDER = attrgetter("node", "gpu")  # GpuRef's own order, compared in C


def utility(speedup: np.ndarray, p: float) -> np.ndarray:
    """U(s) of the p-mean: s^p (p > 0), log s (p = 0), -s^p (p < 0), s for max-min (p = -inf).

    Summed over jobs, U orders allocations as the power mean of their speedups does; p < 1
    is concave, so a speedup is worth more to a job that has little (fairness).

    Examples
    --------
    >>> import numpy as np
    >>> utility(np.array([0.5, 1.0, 2.0]), -1.0).tolist()  # Pollux's p = -1: -1/s
    [-2.0, -1.0, -0.5]
    """
    s = np.asarray(speedup, dtype=float)
    if math.isinf(p):
        return s
    if p > 0:
        return s**p
    if p == 0:
        return np.log(s)
    return -(s**p)


def unallocated_utilities(job: np.ndarray, speedup: np.ndarray, keep: np.ndarray, num_jobs: int,
                          settings: Settings) -> np.ndarray:
    """U0_j of every job from its kept options' speedups (0 for a job without any)."""
    smin = np.full(num_jobs, np.inf)
    np.minimum.at(smin, job[keep], speedup[keep])
    has = np.isfinite(smin)
    u = utility(np.where(has, smin, 1.0), settings.p)
    return np.where(has, u - (settings.unallocated_penalty - 1.0) * np.abs(u), 0.0)


def restart_cost_s(job: JobSpec, settings: Settings) -> float:
    """S, seconds a restart costs the job: its own restart_cost_s, else the round's setting."""
    return job.restart_cost_s if job.restart_cost_s is not None else settings.restart_cost_s


def restart_factor(job: JobSpec, settings: Settings) -> float:
    """Pollux's restart factor max(age - S * restarts, 0) / (age + S): what a running job that moves keeps of its speedup.

    A restart costs S seconds of the job's time; the factor charges it against the job's age,
    so a young job that has restarted often cannot move at all (factor 0).
    """
    cost_s = restart_cost_s(job, settings)
    return max(job.age_s - cost_s * job.num_restarts, 0.0) / (job.age_s + cost_s)


def restart_factors(jobs: tuple[JobSpec, ...], settings: Settings) -> tuple[np.ndarray, np.ndarray]:
    """Each job's restart_factor (1 for a job that does not run: nothing restarts it), and which
    jobs run (JobSpec.running), as arrays: what a moving option's speedup is scaled by."""
    running = np.fromiter(map(_RUNNING, jobs), dtype=bool, count=len(jobs))
    factor = np.ones(len(jobs))
    factor[running] = [restart_factor(jobs[j], settings) for j in np.flatnonzero(running).tolist()]
    return factor, running


_RUNNING = attrgetter("running")


def multi_node_counts(num_nodes: int) -> list[int]:
    """2, 3, 4, 6, 8, 12, 16, 24, ... (2^k and 3 * 2^k) up to num_nodes, and num_nodes itself.

    Examples
    --------
    >>> multi_node_counts(20)
    [2, 3, 4, 6, 8, 12, 16, 20]
    """
    counts = {m * 2**k for k in range(num_nodes.bit_length()) for m in (1, 3)}
    counts = {n for n in counts if 2 <= n <= num_nodes} | ({num_nodes} if num_nodes >= 2 else set())
    return sorted(counts)


def placeable_gpus(cluster: Cluster, count: int, runs: Callable[[int], bool] = lambda num_gpus: True) -> int:
    """The smallest GPU count >= `count` a goodput-style round can give one job on this cluster
    (a chain size on one node, chain_levels, or a count of whole nodes of one size,
    multi_node_counts) at which the job `runs`; where it runs at none of them, the largest such
    count below `count` at which it does; `count` itself where the cluster has no count as
    large, or the job runs at none (it cannot run).

    Examples
    --------
    >>> from schedlab.state import Node
    >>> cluster = Cluster(tuple(Node(f"n{k}", 4) for k in range(3)))
    >>> [placeable_gpus(cluster, g) for g in (2, 3, 6, 12, 13)]
    [2, 4, 8, 12, 13]
    >>> placeable_gpus(cluster, 6, runs=lambda num_gpus: 192 // num_gpus >= 32)  # a batch of 192, >= 32 a GPU
    4
    """
    per_size = Counter(node.gpus for node in cluster.nodes if node.gpus)
    sizes = {d for g in per_size for d in chain_levels(g)}
    sizes |= {n * g for g, k in per_size.items() for n in multi_node_counts(k)}
    above = [d for d in sizes if d >= count]
    if not above:
        return count
    return min((d for d in above if runs(d)), default=max((d for d in sizes if d < count and runs(d)), default=count))


def group_shapes(grp: NodeGroup) -> tuple[np.ndarray, np.ndarray]:
    """(nodes, GPUs) of the group's new configurations: its chain levels on one node, then
    whole-node counts (read-only arrays)."""
    return _shapes(len(grp.nodes), grp.gpus_per_node)


@cache  # every group of every round: a tenth of a small round's option rows
def _shapes(num_nodes: int, gpus_per_node: int) -> tuple[np.ndarray, np.ndarray]:
    multi = multi_node_counts(num_nodes)
    levels = chain_levels(gpus_per_node)
    shapes = (np.array([1] * len(levels) + multi, dtype=int),
              np.array(list(levels) + [n * gpus_per_node for n in multi], dtype=int))
    for a in shapes:
        a.flags.writeable = False
    return shapes


def _eligible(jobs: tuple[JobSpec, ...], groups: tuple[NodeGroup, ...]) -> np.ndarray:
    """(jobs x groups) mask: the job has throughput parameters for the group's GPU type."""
    by_type = {t: np.fromiter((t in job.throughput for job in jobs), dtype=bool, count=len(jobs))
               for t in dict.fromkeys(g.gpu_type for g in groups)}  # a column per GPU type, not per group
    out = np.empty((len(jobs), len(groups)), dtype=bool)
    for g, grp in enumerate(groups):
        out[:, g] = by_type[grp.gpu_type]
    return out


@dataclass(frozen=True)
class _Rows:
    """Flat per-row inputs of one vectorized best_batch call: job, group (-1: a stay option),
    GPU type (index into `types`), nodes and GPUs of every row."""

    job: np.ndarray
    group: np.ndarray
    gpu_type: np.ndarray
    nodes: np.ndarray
    gpus: np.ndarray
    types: tuple[str, ...]

    def take(self, which: np.ndarray) -> _Rows:
        """Rows `which`."""
        return _Rows(self.job[which], self.group[which], self.gpu_type[which], self.nodes[which], self.gpus[which],
                     self.types)

    def then(self, other: _Rows) -> _Rows:
        """These rows, then `other`'s (of the same GPU types)."""
        both = [np.concatenate([a, b]) for a, b in zip((self.job, self.group, self.gpu_type, self.nodes, self.gpus),
                                                      (other.job, other.group, other.gpu_type, other.nodes, other.gpus))]
        return _Rows(both[0], both[1], both[2], both[3], both[4], self.types)


def _value_rows(rows: _Rows, jobs: tuple[JobSpec, ...], fixed_bsz: np.ndarray | None = None,
                scale: tuple[np.ndarray, np.ndarray] | None = None):
    """Best batch of every row (or the given total batch per row); with `scale` = (compute, sync)
    per row, the compute parameters scaled by compute and the four sync ones by sync
    (scaled_params). Rows of one model (throughput parameters, batch limits and fixed batch: the
    jobs of one application on one GPU type) and one size (nodes, GPUs, fixed batch and scale)
    share a shape, whose batch grid and throughput are computed once
    (models.efficiency.best_batch_shared); each row's gradient statistics value it."""
    models, model = model_index(jobs, rows.types, rows.job, rows.gpu_type)
    row_fixed = (np.array([fixed for _, _, fixed in models], dtype=float)[model] if fixed_bsz is None
                 else np.asarray(fixed_bsz, dtype=float))
    sizes = [model, rows.nodes, rows.gpus, dense_ids(row_fixed)] + ([dense_ids(s) for s in scale] if scale is not None else [])
    shapes, shape = distinct_rows(sizes)
    m = model[shapes]
    params = ThroughputParams(*model_table(models, 0, ThroughputParams)[m].T)
    if scale is not None:
        params = scaled_params(params, scale[0][shapes], scale[1][shapes])
    limits = BatchLimits(*model_table(models, 1, BatchLimits)[m].T)
    grads = list(map(_GRAD_STATS, jobs))  # two columns read in C: a tuple per job into np.array took twice as long
    sqr, var = (np.fromiter(map(field, grads), dtype=float, count=len(grads))[rows.job] for field in (_SQR, _VAR))
    keys = None
    if scale is None:  # a shape is its model's key and its size
        key_of = list(models)
        keys = [(key_of[k], n, r, f) for k, n, r, f in zip(m.tolist(), rows.nodes[shapes].tolist(),
                                                            rows.gpus[shapes].tolist(), row_fixed[shapes].tolist())]
    return best_batch_shared(params, limits, rows.nodes[shapes], rows.gpus[shapes], row_fixed[shapes],
                             GradStats(sqr, var), shape, keys)


_GRAD_STATS, _SQR, _VAR = attrgetter("grad_stats"), attrgetter("sqr"), attrgetter("var")


def model_key(job: JobSpec, gpu_type: str) -> tuple:
    """What a job's best batch on a GPU type depends on besides its gradient statistics and shape:
    its throughput parameters there, its batch limits there (JobSpec.batch_on) and its fixed batch."""
    return field_values(job.throughput[gpu_type]), field_values(job.batch_on(gpu_type)), job.fixed_bsz or 0


def model_index(jobs: tuple[JobSpec, ...], types: tuple[str, ...] | list[str], job: np.ndarray,
                gpu_type: np.ndarray) -> tuple[dict[tuple, int], np.ndarray]:
    """The distinct model keys (model_key) of rows of (job, GPU type index into `types`), each
    numbered in the order its first (job, type) pair comes in sorted order, and each row's number.
    Jobs that share their parameters and batch limits (the objects: one application's) are keyed
    once: building a key reads a dozen fields."""
    T = max(len(types), 1)
    pair = job * T + gpu_type
    first, pair_of_row = distinct_rows([pair])  # the pairs in sorted order
    models: dict[tuple, int] = {}
    known: dict[tuple, int] = {}  # (id(params), id(limits), fixed batch) -> the model's number
    out = []
    for k in pair[first].tolist():
        spec, name = jobs[k // T], types[k % T]
        same = (id(spec.throughput[name]), id(spec.batch_on(name)), spec.fixed_bsz)
        if (m := known.get(same)) is None:
            m = known[same] = models.setdefault(model_key(spec, name), len(models))
        out.append(m)
    return models, np.array(out, dtype=np.int64)[pair_of_row]


def model_table(models: dict[tuple, int], part: int, cls: type) -> np.ndarray:
    """One part of every model key (model_key) as a table, a row per model, a column per field of `cls`."""
    return np.array([key[part] for key in models]).reshape(len(models), len(dataclasses.fields(cls)))


def distinct_values(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(values, return_inverse=True), flat, without sorting where every value is the
    same (a cluster of one GPU type: sorting 100,000 type names took 4 ms of a 2,048-GPU round)."""
    if len(values) and (values == values[0]).all():
        return values[:1], np.zeros(len(values), dtype=np.intp)
    distinct, inverse = np.unique(values, return_inverse=True)
    return distinct, inverse.ravel()


def dense_ids(values: np.ndarray) -> np.ndarray:
    """Each value's rank among the distinct values (ids 0..k-1); all 0 at once where every value
    is the same (most rounds' fixed batches, a freeze level's scales)."""
    return distinct_values(values)[1]


def distinct_rows(columns: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of non-negative integer columns, numbered in sorted order: the index of
    one row of each (any: a distinct row's rows are alike), and each row's number."""
    key, span = np.zeros(len(columns[0]), dtype=np.int64), 1
    for col in columns:
        size = int(col.max(initial=0)) + 1
        if span * size >= 2**62:  # the combined key would overflow: renumber it densely first
            key = dense_ids(key)
            span = int(key.max(initial=0)) + 1
        key, span = key * size + col, span * size
    if span > max(_DENSE_SPAN, 4 * len(key)):
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        return first, inverse.ravel()
    # A span of keys within a few times the rows: each key's rank read from a table of the span,
    # not sorted (np.unique's sort was a fifth of a small round's valuation); the same numbering.
    present = np.zeros(span, dtype=bool)
    present[key] = True
    distinct = np.flatnonzero(present)
    rank = np.zeros(span, dtype=np.intp)
    rank[distinct] = np.arange(len(distinct))
    inverse = rank[key]
    first = np.empty(len(distinct), dtype=np.intp)
    first[inverse] = np.arange(len(key))  # some row of each: a key's rows are alike
    return first, inverse


_DENSE_SPAN = 1 << 14  # distinct_rows ranks keys by a table up to this span (or 4 per row)


def field_values(obj) -> tuple[float, ...]:
    """A flat dataclass's field values in order (one C-level getter per class: this runs for every
    job of every round)."""
    cls = type(obj)
    if cls not in _GETTERS:
        _GETTERS[cls] = attrgetter(*(f.name for f in dataclasses.fields(cls)))
    return _GETTERS[cls](obj)


_GETTERS: dict[type, Callable[[Any], tuple]] = {}


def prune_dominated(job: np.ndarray, group: np.ndarray, num_gpus: np.ndarray, value: np.ndarray) -> np.ndarray:
    """Mask of options not dominated within their (job, group).

    A larger shape of the same group uses at least as many slots at every chain level, so it
    is worth keeping only if it is worth strictly more than every smaller one. Stay options
    (group -1) hold specific GPUs and are always kept. Removing dominated options cannot
    change the optimum (any solution using one stays feasible and no worse with the smaller).
    """
    n = len(job)
    if not n:
        return np.ones(0, dtype=bool)
    # steps by slicing, not np.diff: this runs for every round, most of them a few jobs'
    step_job, step_group, step_gpus = job[1:] - job[:-1], group[1:] - group[:-1], num_gpus[1:] - num_gpus[:-1]
    # ordered: by job, group and GPUs, a job's stay (group -1) last, as options come
    next_in_job = (step_group > 0) | (group[1:] < 0) | (step_group == 0) & (step_gpus >= 0)
    ordered = ((step_job > 0) | (step_job == 0) & (group[:-1] >= 0) & next_in_job).all()
    values = np.asarray(value, dtype=float)
    if not ordered:
        order = np.lexsort((num_gpus, group, job))
        job, group, values = job[order], group[order], values[order]
        step_job, step_group = job[1:] - job[:-1], group[1:] - group[:-1]
    starts = np.flatnonzero(np.concatenate(([True], (step_job != 0) | (step_group != 0))))  # each (job, group)'s first
    segment = np.zeros(n, dtype=np.intp)
    segment[starts[1:]] = 1
    np.cumsum(segment, out=segment)
    # A running max per segment, in a table of a row per segment, a column per place in it (after
    # a column of -inf): each option compares with the best of the smaller shapes before it. Not
    # by ranks in one sorted order, whose sort was half of this at 1,000 options.
    place = np.arange(n) - starts[segment]
    best = np.full((len(starts), int(place.max()) + 2), -np.inf)
    best[segment, place + 1] = values
    np.maximum.accumulate(best, axis=1, out=best)
    kept = (group < 0) | (place == 0) | (values > best[segment, place])
    if ordered:
        return kept
    keep = np.empty(n, dtype=bool)
    keep[order] = kept
    return keep


def _option_rows(opts: OptionSet) -> _Rows:
    """The rows (job, group, GPU type, nodes, GPUs) of the options, for re-valuing them."""
    jobs, nodes = opts.round_input.jobs, opts.round_input.cluster.nodes
    types = tuple(sorted({g.gpu_type for g in opts.groups} | {n.gpu_type for n in nodes}))
    node_type = {n.id: types.index(n.gpu_type) for n in nodes}
    group_type = np.array([types.index(g.gpu_type) for g in opts.groups] + [-1], dtype=int)[opts.group]
    stays = np.flatnonzero(opts.group < 0)
    group_type[stays] = [node_type[jobs[j].current_gpus[0].node] for j in opts.job[stays]]
    return _Rows(opts.job, opts.group, group_type, opts.num_nodes, opts.num_gpus, types)


def option_goodput(opts: OptionSet, total_bsz: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Goodput, micro-batch and accumulation of every option trained at the given total batch
    (instead of its best one), e.g. ONES's linear batch scaling."""
    choice = _value_rows(_option_rows(opts), opts.round_input.jobs, np.asarray(total_bsz, dtype=float))
    return choice.goodput, choice.local_bsz, choice.accum_steps


def option_best_batch(opts: OptionSet, which: np.ndarray, compute: np.ndarray, sync: np.ndarray):
    """The best batch and its goodput of options `which` (indices) with their compute and sync
    times scaled by compute[i] and sync[i]. One vectorized call; a BatchChoice aligned with `which`."""
    return _value_rows(_option_rows(opts).take(np.asarray(which, dtype=int)), opts.round_input.jobs,
                       scale=(np.asarray(compute, dtype=float), np.asarray(sync, dtype=float)))


def _round_rows(round_input: RoundInput, groups: tuple[NodeGroup, ...], eligible: np.ndarray,
                running: np.ndarray) -> tuple[_Rows, dict[int, Mapping[int, int]]]:
    """Every job's new shapes in every usable group (within its GPU bounds), then its stay
    shape if running within bounds; ordered by job, group, shape. And each stayer's GPUs per node.
    `eligible` is _eligible's mask, `running` restart_factors's."""
    jobs, nodes = round_input.jobs, round_input.cluster.nodes
    types = tuple(sorted(round_input.cluster.gpu_types))  # the cluster's own set: not a pass over its nodes each round
    lo, hi = _gpu_limits(jobs)
    held = np.fromiter(map(len, map(_CURRENT_GPUS, jobs)), dtype=int, count=len(jobs))
    parts = []
    movable = eligible & ~np.fromiter(map(_PINNED, jobs), dtype=bool, count=len(jobs))[:, None]  # a pinned job only stays
    for g, grp in enumerate(groups):
        shape_nodes, shape_gpus = group_shapes(grp)
        mine = np.flatnonzero(movable[:, g])
        jj, ss = np.nonzero((shape_gpus >= lo[mine, None]) & (shape_gpus <= hi[mine, None]))
        parts.append(np.array([mine[jj], np.full(len(jj), g), ss, shape_nodes[ss], shape_gpus[ss],  # not np.stack: ~2 us
                               np.full(len(jj), types.index(grp.gpu_type))]))
    layout = round_input.cluster.layout
    stay_nodes: dict[int, Mapping[int, int]] = {}
    stays = []
    for j in np.flatnonzero(eligible.any(axis=1) & running & (lo <= held) & (held <= hi)).tolist():
        job = jobs[j]
        counts = layout(job.current_gpus).counts
        stay_nodes[j] = counts
        gpu_type = types.index(nodes[next(iter(counts))].gpu_type)
        stays.append((j, -1, len(groups), len(counts), len(job.current_gpus), gpu_type))
    parts.append(np.array(stays, dtype=int).reshape(-1, 6).T)
    job, group, shape, num_nodes, gpus, gpu_type = np.concatenate(parts, axis=1)
    order = np.lexsort((shape, np.where(group < 0, len(groups), group), job))
    return _Rows(job[order], group[order], gpu_type[order], num_nodes[order], gpus[order], types), stay_nodes


def _gpu_limits(jobs: tuple[JobSpec, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Every job's (min_gpus, max_gpus), as columns read in C (a list per field per use took
    ~70 us of a 100-job round's options, with the other per-job reads)."""
    return np.fromiter(map(_MIN_GPUS, jobs), dtype=int, count=len(jobs)), np.fromiter(map(_MAX_GPUS, jobs), dtype=int,
                                                                                      count=len(jobs))


_MIN_GPUS, _MAX_GPUS, _PINNED = attrgetter("min_gpus"), attrgetter("max_gpus"), attrgetter("pinned")
_CURRENT_GPUS = attrgetter("current_gpus")


def fair_shapes(round_input: RoundInput, groups: tuple[NodeGroup, ...],
                eligible: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
    """Every job's fair share as a shape (the speedup's reference, module docstring): the round's
    fair share of GPUs (RoundInput.fair_share_gpus) within the job's GPU limits, on the largest
    group of a GPU type it can use, packed on the fewest nodes.

    Returns (job, group, nodes, GPUs), one entry per job that can use some group. `eligible`:
    _eligible's mask, where the caller has it.
    """
    jobs = round_input.jobs
    eligible = _eligible(jobs, groups) if eligible is None else eligible
    has = np.flatnonzero(eligible.any(axis=1))
    capacity = np.array([len(g.nodes) * g.gpus_per_node for g in groups], dtype=int)
    per_node = np.array([g.gpus_per_node for g in groups], dtype=int)
    best = (np.argmax(np.where(eligible[has], capacity, -1), axis=1) if len(groups)  # the first largest
            else np.zeros(0, dtype=int))
    lo, hi = _gpu_limits(jobs)
    lo, hi = np.maximum(lo[has], 1), hi[has]
    gpus = np.minimum(np.minimum(np.maximum(round_input.fair_share_gpus, lo), hi), capacity[best])
    return has, best, -(-gpus // per_node[best]), gpus


def _fair_rows(round_input: RoundInput, groups: tuple[NodeGroup, ...], types: tuple[str, ...],
               eligible: np.ndarray) -> _Rows:
    """fair_shapes as rows to value."""
    has, best, nodes, gpus = fair_shapes(round_input, groups, eligible)
    group_type = np.array([types.index(g.gpu_type) for g in groups], dtype=int)
    return _Rows(has, np.full(len(has), -1), group_type[best], nodes, gpus, types)


def enumerate_options(round_input: RoundInput, prune: bool = True) -> OptionSet:
    """Every job's candidate configurations with goodput, speedup and utility.

    prune=False keeps dominated options (see prune_dominated); tests use it to prove pruning exact.
    """
    jobs, settings = round_input.jobs, round_input.settings
    groups = node_groups(round_input)
    eligible = _eligible(jobs, groups)
    factor, running = restart_factors(jobs, settings)
    rows, stay_nodes = _round_rows(round_input, groups, eligible, running)
    job_arr = rows.job
    n = len(job_arr)
    goodput, speedup = np.zeros(0), np.zeros(0)
    local_bsz, accum_steps = np.zeros(0, dtype=int), np.zeros(0, dtype=int)
    if n:
        fair_rows = _fair_rows(round_input, groups, rows.types, eligible)
        valued = _value_rows(rows.then(fair_rows), jobs)  # the options and the fair shares, in one valuation
        goodput, local_bsz, accum_steps = valued.goodput[:n], valued.local_bsz[:n], valued.accum_steps[:n]
        fair_goodput = np.zeros(len(jobs))
        fair_goodput[fair_rows.job] = valued.goodput[n:]
        # A fair share the job cannot use at all (batch limits) falls back to its best option.
        best = np.zeros(len(jobs))
        np.maximum.at(best, job_arr, goodput)
        fair_goodput = np.where(fair_goodput > 0, fair_goodput, best)
        speedup = np.divide(goodput, fair_goodput[job_arr], out=np.zeros_like(goodput), where=fair_goodput[job_arr] > 0)

    group_arr = rows.group
    moves = (group_arr >= 0) & running[job_arr]
    penalized = np.where(moves, speedup * factor[job_arr] if len(job_arr) else speedup, speedup)
    keep = (goodput > 0) & (penalized > 0)

    U0 = unallocated_utilities(job_arr, speedup, keep, len(jobs), settings)
    kept_stays = set(job_arr[keep & (group_arr < 0)].tolist())
    stay_nodes = {j: c for j, c in stay_nodes.items() if j in kept_stays}

    if prune:
        util = np.full(len(job_arr), -np.inf)
        util[keep] = utility(penalized[keep], settings.p)
        keep &= prune_dominated(job_arr, group_arr, rows.gpus, util)
    pick = np.flatnonzero(keep)
    return OptionSet(
        round_input=round_input,
        groups=groups,
        job=job_arr[pick],
        group=group_arr[pick],
        num_nodes=rows.nodes[pick],
        num_gpus=rows.gpus[pick],
        goodput=goodput[pick],
        speedup=speedup[pick],
        penalized_speedup=penalized[pick],
        utility=utility(penalized[pick], settings.p),
        local_bsz=local_bsz[pick],
        accum_steps=accum_steps[pick],
        U0=U0,
        stay_nodes=stay_nodes,
    )
