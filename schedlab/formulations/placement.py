r"""Variability-aware placement (PAL, Jain et al. SC'24) as an exact MILP over GPU groups.

The jobs chosen to run this round (gang-scheduled: job $j$ needs exactly $G_j$ GPUs) are placed
on concrete GPUs of one GPU type each, trading each job's slowest GPU against the spread of its
GPUs over nodes.

**Sets**

- $J$ jobs; $N$ nodes; $\Theta$ GPU types (A100, T4, ...); $K$ GPU groups: GPUs on the same
  node, of one type, with the same slowdown for every application class in play
  (interchangeable, so counted, not named)
- $\Theta_j \subseteq \Theta$ the types job $j$ can run on; $K_j$ the groups of those types
- $T_j$ the distinct effective slowdowns $\tau_{j0} < \tau_{j1} < \dots$ of job $j$ on the
  groups of $K_j$ (its tiers)
- $R$ the running jobs, $S \subseteq R$ those that can stay (all their $G_j$ current GPUs
  offered), $P \subseteq S$ the pinned ones (a checkpoint or restore in progress)
- $M \subseteq J$ the jobs with more than one type of $\Theta_j$ offered

**Parameters**

- $G_j$ GPUs of job $j$; $w_j$ its weight
- $\mathit{cap}_k$ GPUs of group $k$, on node $n(k)$, of type $\theta(k)$
- $r_{j\theta} \in (0, 1]$ job $j$'s speed on type $\theta$ relative to its fastest type (1 on
  a cluster of one type); a GPU's effective slowdown for job $j$ is its slowdown (measured
  within its type, PAL's) over $r_{j\theta(k)}$, and $t_j(k)$ the tier of group $k \in K_j$
- $L$ the across-node locality factor (PAL's simulator: 1.7)
- $\rho_j$ the restart penalty (fraction of a round) of moving running job $j$;
  $\mathit{cur}_{jk}$ its current GPUs of group $k$

**Variables**

- $x_{jk} \in \{0, \dots, \min(\mathit{cap}_k, G_j)\}$ for $k \in K_j$ (0 for the other
  groups): GPUs of group $k$ given to job $j$
- $y_{jn} \in \{0, 1\}$: job $j$ uses node $n$ (0 on a node without a group of $K_j$)
- $z_{jt} \in \{0, 1\}$, $t \ge 1$: job $j$ uses a GPU of tier $\ge t$ (ordered tier binaries)
- $m_j \in \{0, 1\}$: job $j$ spans more than one node (fixed to 1 when $G_j$ exceeds the
  largest node of its types)
- $p_j \in [0, 1/\tau_{j0}]$: $p_j = m_j / \tau_{\mathit{worst}}$, the part of the speed lost to
  spread
- $s_j \in \{0, 1\}$, $j \in S$: running job $j$ keeps exactly its GPUs
- $v_{j\theta} \in \{0, 1\}$, $j \in M$, $\theta \in \Theta_j$ offered: job $j$ runs on type
  $\theta$

**Objective** (maximize weighted job speed,
$\text{speed} = 1 / (\text{worst effective slowdown} \times \text{locality factor})$)

$$
\max \; \sum_j w_j \Bigl[ \frac{1}{\tau_{j0}} + \sum_{t \ge 1} d_{jt} \, z_{jt}
  - \Bigl(1 - \frac{1}{L}\Bigr) p_j \Bigr] - \sum_{j \in R} w_j \, \rho_j \, (1 - s_j)
$$

with $s_j = 0$ for $j \in R \setminus S$, and $d_{jt} = 1/\tau_{jt} - 1/\tau_{j,t-1} < 0$: the
telescoped $1/\tau_{\mathit{worst}}$, exact because $z_{j\cdot}$ is monotone and pushed down by
the objective, up by (tier).

**Constraints**

$$
\begin{aligned}
&\text{(place)}   && \sum_k x_{jk} = G_j
                  && j \in J \\
&\text{(cap)}     && \sum_j x_{jk} \le \mathit{cap}_k
                  && k \in K \\
&\text{(node)}    && x_{jk} \le \min(\mathit{cap}_k, G_j) \, y_{j,n(k)}
                  && j \in J,\ k \in K \\
&\text{(tier)}    && x_{jk} \le \min(\mathit{cap}_k, G_j) \, z_{j,t_j(k)}
                  && j \in J,\ k \in K,\ t_j(k) \ge 1 \\
&\text{(order)}   && z_{j,t+1} \le z_{jt}
                  && j \in J,\ t \ge 1 \\
&\text{(spread)}  && \sum_n y_{jn} \le 1 + \bigl(\min(|N|, G_j) - 1\bigr) \, m_j
                  && j \in J \\
&\text{(onenode)} && \sum_{k \text{ on } n} x_{jk} \ge G_j \, (y_{jn} - m_j)
                  && j \in J \text{ that fit a node},\ n \in N \\
&\text{(lost)}    && p_j \ge \frac{1}{\tau_{j0}} + \sum_{t \ge 1} d_{jt} \, z_{jt}
                     - \frac{1}{\tau_{j0}} \, (1 - m_j)
                  && j \in J \\
&\text{(stay)}    && x_{jk} \ge \mathit{cur}_{jk} \, s_j
                  && j \in S,\ k \in K,\ \mathit{cur}_{jk} > 0 \\
&\text{(typed)}   && \sum_{k :\ \theta(k) = \theta} x_{jk} \le G_j \, v_{j\theta}
                  && j \in M,\ \theta \in \Theta_j \\
&\text{(onetype)} && \sum_{\theta} v_{j\theta} \le 1
                  && j \in M \\
&\text{(pin)}     && x_{jk} = \mathit{cur}_{jk}
                  && j \in P,\ k \in K
\end{aligned}
$$

(place) places every job whole; (cap) is the capacity of each group; (node) and (tier) mark the
nodes and tiers used; (order) orders the tiers. By (spread) $G_j$ GPUs span at most $G_j$ nodes.
(onenode), for the jobs of $G_j$ no more than the largest node's GPUs, keeps a job on one node
unless it is spread: valid, and without it the LP spreads a job for about $1/|N|$ of $m_j$.
(lost) is $p_j$'s lower bound ($p_j$ is penalized, so it is tight). By (stay) staying keeps the
current GPUs. (typed) and (onetype) put a job's GPUs on one type: its speed is then its worst
GPU's slowdown within that type over $r_{j\theta}$, its worst effective slowdown, which the
tiers telescope exactly as on one type (a job of one type offered needs neither: $x_{jk} = 0$
off $K_j$). (pin) holds a pinned job on exactly its current GPUs ($\mathit{cur}_{jk} = 0$ off
its groups): a column bound, $x_{jk}$'s lower and upper bounds, not a row.

**Valid inequalities** (no integer point is cut off; they tighten the LP bound or break
symmetry)

$$
\begin{aligned}
&\text{(cover)}  && \sum_{k :\ t_j(k) \ge t} x_{jk} \le G_j \, z_{jt}
                 && j \in J,\ t \ge 1 \\
&\text{(alone)}  && z_{jt} \ge \sum_{n :\ a_{jn} \ge t} y_{jn} - \min(|N|, G_j) \, m_j
                 && j \in J \text{ that fit a node},\ t \ge 1 \\
&\text{(twins)}  && \sum_t z_{at} \ge \sum_t z_{bt}
                 && \text{consecutive twins } a, b \\
&\text{(scarce)} && \sum_{j \in C} G_j \, (1 - z_{jt}) \le F_{Ct}
                 && C,\ t \ge 1 :\ F_{Ct} < \textstyle\sum_{j \in C} G_j \\
&\text{(scarce\_count)} && \sum_{j \in C,\ G_j = g} (1 - z_{jt}) \le \lfloor F_{Ct} / g \rfloor
                 && (C, t) \text{ of (scarce)},\ g
\end{aligned}
$$

(cover) is (tier) summed over groups (an LP spreads a job thinly). In (alone), $a_{jn}$ is the
tier of node $n$'s $G_j$-th best GPU for job $j$ (past the last tier when $n$ has fewer than
$G_j$ GPUs): a job on one node has a worst tier of at least $a_{jn}$. (twins) fixes the order
of consecutive interchangeable jobs $a$, $b$ (waiting, of one size, class, weight and type
speeds). (scarce) holds for the jobs $C$ of one class (the same tiers on the same groups) and
each tier $t \ge 1$ whose faster GPUs, $F_{Ct}$ of them (groups of $K_j$ of tier $< t$), are
fewer than $C$ needs; (scarce\_count) for each size $g$ of more such jobs than
$\lfloor F_{Ct} / g \rfloor$ ($|\{j \in C : G_j = g\}| > \lfloor F_{Ct} / g \rfloor$).

`build` writes these as arrays, each row keyed by its tag and indices, and `build_pyomo` as
Pyomo components of the same names, written term by term apart from `build`'s rows from the
same index sets (`model_sets`), with the columns in one order. The tests check one against the
other: the same optimum, the Pyomo optimum a point of the arrays worth the same there, and the
same number of rows of each tag.

As a round formulation (`placement_round.placement_model`, `FORMULATIONS["placement"]`), every
job of a RoundInput is placed on exactly $G_j$ = `JobSpec.gang_gpus` (`requested_gpus`, else
`min_gpus`) GPUs of its cluster: a GPU's slowdown for a class is `Node.gpu_slowdown`'s (1 where
the node does not list the class), $L$ the topology's `across_node_factor` (1 without a
topology), $w_j = 1$ and $\rho_j = 0$ (a move shows in `JobAllocation.restarted`, unpriced).
Jobs train at `JobSpec.submitted_bsz` (`fixed_bsz`, else `requested_bsz`, else `init_bsz`),
split within their batch limits on the type of their GPUs (`JobSpec.batch_on`); goodput is not
modelled (0), the job's speed is its speedup. On a cluster of several types, $\Theta_j$ are the
types the job has `JobSpec.throughput` for (fitted or projected; an allocation on a projected
type says so, `JobAllocation.projected`) on which that split fits, and $r_{j\theta}$ its
throughput (models.throughput) on $G_j$ GPUs of one node of type $\theta$ at that batch over the
best of its types (`placement_round.type_speeds`); on one type, every job runs on it at $r = 1$,
as before. $P$ are the jobs with `JobSpec.pinned`; each must be given exactly the GPUs it holds
($G_j$ = its current GPUs' count, else InputError naming `jobs[i].pinned`), and $\Theta_j$ is
their type. PAL's greedy is the warm start and the fallback, so an answer is never worse than it.
Limitations: every job given is placed, so the jobs must fit on their types together (the
greedy raises InputError naming a job it could not place): the caller chooses which jobs run
(policies.placement: PAL's queue, per type; policies.compose: an allocation policy). The
problem's types and the objective a placement is worth are in placement_problem.py; above 128
GPUs the round is solved a window at a time (placement_windows.py).

What we changed from PAL: PAL places greedily (`placement_greedy.pal_greedy`, a formulation
because it is this model's warm start; policies.placement runs it as the `pal` policy); this is
the exact model of the same trade-off. The valid inequalities are ours: on full random 64-GPU
rounds (experiments/placement_scale.py) they take the LP bound from 0.3-0.9 % to 0.03-0.2 %
above the optimum, and, with CP-SAT's full linearization (solvers.cpsat), the portfolio proves
all of ten rounds in 2 s, where it had proved 4 of 5. Locality is counted per node (PAL's
simulator has one across-node factor); moving a job costs $\rho_j$ of its weight, PAL's "same
GPUs, no restart". Solved by HiGHS (solvers.highs_direct) or, from the same arrays, by CP-SAT
(solvers.cpsat).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from schedlab.formulations.placement_problem import PlacementInput, PlacementJob, effective_slowdown
from schedlab.milp import MilpArrays, Rows, stack_rows

if TYPE_CHECKING:
    import pyomo.environ as pyo

__all__ = ["JobColumns", "ModelSets", "PlacementModel", "build", "build_pyomo", "decode", "gpu_groups", "model_sets",
           "point", "twins_ordered"]


@dataclass(frozen=True)
class ModelSets:
    """The model's index sets and parameters (module docstring), by position.

    Shared by `build` and `build_pyomo`, so that the two are one model: j indexes the jobs of
    the PlacementInput, k the GPU groups, n the nodes, t a job's tiers (0 the fastest), theta
    the GPU types.
    """

    types: tuple[tuple[str, ...], ...]  # K: the GPU ids of each group
    cap: np.ndarray  # cap_k
    nodes: tuple[str, ...]  # N
    node_of: np.ndarray  # n(k)
    largest_node: np.ndarray  # per job: GPUs of the largest node with a group of K_j
    need: np.ndarray  # G_j
    tiers: tuple[np.ndarray, ...]  # per job: tau_j0 < tau_j1 < ... (effective slowdowns)
    tier_of: tuple[np.ndarray, ...]  # per job: t_j(k), -1 for a group outside K_j
    current: tuple[dict[int, int] | None, ...]  # per job: cur_jk (group -> GPUs) if in S, else None
    gpu_types: tuple[str, ...]  # Theta, the GPU types offered
    type_of: np.ndarray  # theta(k), an index of gpu_types
    usable_nodes: tuple[np.ndarray, ...]  # per job: whether each node holds a group of K_j
    bounds: tuple[list[float], ...]  # per job: bound(j, k) of every group k
    pinned: tuple[bool, ...]  # per job: whether it is in P

    def x_range(self, j: int, k: int) -> tuple[float, float]:
        """x_jk's bounds: (cur_jk, cur_jk) for a pinned job (pin), else (0, bound(j, k))."""
        if self.pinned[j]:
            held = float((self.current[j] or {}).get(k, 0))
            return held, held
        return 0.0, self.bounds[j][k]

    def bound(self, j: int, k: int) -> float:
        """min(cap_k, G_j) for k in K_j, else 0: x_jk's upper bound, the big-M of (node) and (tier)."""
        return self.bounds[j][k]

    def usable_node(self, j: int, n: int) -> bool:
        """Whether node n holds a group of K_j (else y_jn = 0)."""
        return bool(self.usable_nodes[j][n])

    def job_types(self, j: int) -> tuple[int, ...]:
        """The types of Theta_j offered, as indices of gpu_types, if more than one (job j in M), else ()."""
        found = tuple(int(t) for t in np.unique(self.type_of[self.tier_of[j] >= 0]))
        return found if len(found) > 1 else ()

    def of_type(self, theta: int) -> np.ndarray:
        """The groups of GPU type theta."""
        return np.flatnonzero(self.type_of == theta)

    def gain(self, j: int) -> np.ndarray:
        """d_jt = 1/tau_jt - 1/tau_j(t-1) < 0 for t >= 1 (at index t - 1): z_jt's objective step."""
        return 1 / self.tiers[j][1:] - 1 / self.tiers[j][:-1]

    def spans(self, j: int) -> bool:
        """No node of its types holds job j, so m_j = 1."""
        return bool(self.need[j] > self.largest_node[j])

    def spread_max(self, j: int) -> float:
        """min(|N|, G_j) - 1: the extra nodes a spread job may use."""
        return float(min(len(self.nodes), self.need[j]) - 1)

    def at_least(self, j: int, t: int) -> np.ndarray:
        """The groups of tier >= t for job j."""
        return np.flatnonzero(self.tier_of[j] >= t)

    def alone_tiers(self, j: int) -> np.ndarray:
        """a_jn of every node n: the tier of node n's G_j-th best GPU for job j.

        That is the least worst tier job j can have on node n alone; past the last tier when n
        has fewer than G_j GPUs (the job cannot be on it alone).
        """
        out = np.full(len(self.nodes), len(self.tiers[j]))
        for n in range(len(self.nodes)):
            on = self.on_node(n)
            on = on[self.tier_of[j][on] >= 0]
            tiers = np.sort(np.repeat(self.tier_of[j][on], self.cap[on]))
            if len(tiers) >= self.need[j]:
                out[n] = tiers[self.need[j] - 1]
        return out

    def scarce_tiers(self) -> dict[tuple[tuple[int, ...], int], int]:
        """(C, t) -> F_Ct, for the rows of (scarce).

        C are the jobs of one class (the same tiers on the same groups), t >= 1 each tier whose
        faster GPUs (of K_j), F_Ct of them, are fewer than those jobs need together.
        """
        by_tiers: dict[bytes, list[int]] = {}
        for j in range(len(self.need)):
            by_tiers.setdefault(self.tier_of[j].tobytes(), []).append(j)
        out = {}
        for members in by_tiers.values():
            tier_of = self.tier_of[members[0]]
            for t in range(1, len(self.tiers[members[0]])):
                fast = int(self.cap[(tier_of >= 0) & (tier_of < t)].sum())
                if fast < self.need[members].sum():
                    out[tuple(members), t] = fast
        return out

    def scarce_sizes(self, members: tuple[int, ...], fast: int) -> dict[int, list[int]]:
        """The jobs of `members` by size g, for the sizes of which more jobs than F_Ct // g exist."""
        out: dict[int, list[int]] = {}
        for j in members:
            out.setdefault(int(self.need[j]), []).append(j)
        return {g: same for g, same in out.items() if len(same) > fast // g}

    def twin_groups(self, pi: PlacementInput) -> tuple[tuple[int, ...], ...]:
        """Interchangeable jobs with tiers to order: waiting, of one size, class, weight and type speeds."""
        same: dict[tuple, list[int]] = {}
        for j, job in enumerate(pi.jobs):
            if not job.current_gpus and len(self.tiers[j]) > 1:
                same.setdefault((job.num_gpus, job.app_class, job.weight, job.type_speed), []).append(j)
        return tuple(tuple(group) for group in same.values() if len(group) > 1)

    def twins(self, pi: PlacementInput) -> list[tuple[int, int]]:
        """The consecutive pairs (a, b) of each group of twins, as (twins) orders them."""
        return [(a, b) for group in self.twin_groups(pi) for a, b in zip(group, group[1:])]

    def on_node(self, n: int) -> np.ndarray:
        """The groups on node n."""
        return np.flatnonzero(self.node_of == n)


def gpu_groups(pi: PlacementInput) -> list[tuple[str, ...]]:
    """GPUs grouped by node, GPU type and slowdown for every class in play (interchangeable GPUs)."""
    classes = sorted({j.app_class for j in pi.jobs})
    groups: dict[tuple, list[str]] = {}
    for g in pi.gpus:
        groups.setdefault((g.node, g.gpu_type, *(round(g.slowdown[c], 9) for c in classes)), []).append(g.id)
    return [tuple(ids) for ids in groups.values()]


def model_sets(pi: PlacementInput) -> ModelSets:
    """The index sets and parameters of the model of `pi` (module docstring)."""
    types = gpu_groups(pi)
    group_of = _group_of(types)
    cap = np.array([len(t) for t in types], dtype=int)
    nodes = tuple(sorted({pi.node_of(t[0]) for t in types}))
    node_of = np.array([nodes.index(pi.node_of(t[0])) for t in types], dtype=int)
    gpu_types = tuple(sorted({pi.gpu_index[t[0]].gpu_type for t in types}))
    type_of = np.array([gpu_types.index(pi.gpu_index[t[0]].gpu_type) for t in types], dtype=int)
    slowdown = {c: np.array([pi.gpu_index[t[0]].slowdown[c] for t in types], dtype=float)
                for c in {j.app_class for j in pi.jobs}}
    per_node = np.bincount(node_of, weights=cap, minlength=len(nodes))
    tiers, tier_of, largest_node, usable_nodes, bounds = [], [], [], [], []
    for job in pi.jobs:
        r = np.array([job.speed_on(t) for t in gpu_types])[type_of]  # r_j theta(k); 0 off Theta_j
        usable = r > 0
        tau_k = np.round(np.divide(slowdown[job.app_class], r, out=np.full(len(types), np.inf), where=usable), 9)
        tiers.append(np.unique(tau_k[usable]))
        tier_of.append(np.where(usable, np.searchsorted(tiers[-1], tau_k), -1))
        on_usable = per_node if usable.all() else np.bincount(node_of[usable], weights=cap[usable], minlength=len(nodes))
        largest_node.append(on_usable.max(initial=0))
        usable_nodes.append(on_usable > 0)
        bounds.append(np.where(usable, np.minimum(cap, job.num_gpus), 0).astype(float).tolist())
    need = np.array([j.num_gpus for j in pi.jobs], dtype=int)
    return ModelSets(tuple(types), cap, nodes, node_of, np.array(largest_node, dtype=int), need, tuple(tiers),
                     tuple(tier_of), tuple(_current_counts(j, group_of) for j in pi.jobs), gpu_types, type_of,
                     tuple(usable_nodes), tuple(bounds), tuple(j.pinned for j in pi.jobs))


@dataclass(frozen=True)
class JobColumns:
    """One job's columns: x per group, y per node, z per tier >= 1, m, p, s (-1: none), v per type of Theta_j (j in M)."""

    x: tuple[int, ...]
    y: tuple[int, ...]
    z: tuple[int, ...]
    m: int
    p: int
    s: int
    tiers: tuple[float, ...]
    v: tuple[int, ...] = ()
    v_types: tuple[str, ...] = ()  # the GPU type of each v column


@dataclass(frozen=True)
class PlacementModel:
    """The model as `build` writes it: its arrays and what their columns and rows mean.

    Attributes
    ----------
    arrays
        The MILP (maximize; its offset the constant part of the objective).
    types, nodes
        The GPU groups (GPU ids of each) and node ids the columns count.
    jobs
        Each job's columns, in the PlacementInput's job order.
    twin_groups
        The groups of interchangeable jobs that (twins) orders.
    row_keys
        Each row's key: its tag in the module docstring, then its indices.
    """

    arrays: MilpArrays
    types: tuple[tuple[str, ...], ...]  # GPU ids per group
    nodes: tuple[str, ...]
    jobs: tuple[JobColumns, ...]
    twin_groups: tuple[tuple[int, ...], ...] = ()  # ModelSets.twin_groups: (twins) orders them
    row_keys: tuple[tuple, ...] = ()  # per row of arrays.A, e.g. ("node", j, k)

    @property
    def x_cols(self) -> dict[tuple[int, int], int]:
        """(job, group) -> the column of x_jk."""
        return {(j, k): c for j, cols in enumerate(self.jobs) for k, c in enumerate(cols.x)}


def build(pi: PlacementInput) -> PlacementModel:
    """The model of `pi` as arrays (module docstring), with what its columns and rows mean.

    Columns, job by job: x per group, y per node, z per tier >= 1, m, p, then s if the job can
    stay and v per type if it has several (j in M). The objective's constant
    sum_j w_j (1/tau_j0 - rho_j [j in R]) is the arrays' offset. Rows are keyed by their tag in
    the module docstring and its indices (job, group, node, tier, type), in one block: each
    job's rows, then (cap), (twins) and (scarce) with its (scarce_count), the order the solvers
    have always been given.
    """
    st = model_sets(pi)
    types = range(len(st.types))
    cols: list[tuple[float, float, float, bool]] = []  # (c, lo, hi, integer)
    rows = Rows()

    def col(c: float, hi: float, lo: float = 0.0, integer: bool = True) -> int:
        cols.append((c, lo, hi, integer))
        return len(cols) - 1

    job_cols: list[JobColumns] = []
    offset = 0.0
    for j, job in enumerate(pi.jobs):
        w, G, inv0, d = job.weight, float(st.need[j]), 1 / st.tiers[j][0], st.gain(j)
        offset += w * inv0 - w * pi.restart_penalty * bool(job.current_gpus)
        x = [col(0.0, hi, lo=lo) for lo, hi in (st.x_range(j, k) for k in types)]  # (pin) in the bounds
        y = [col(0.0, float(st.usable_node(j, n))) for n in range(len(st.nodes))]
        z = [col(w * d_t, 1.0) for d_t in d]  # z[t - 1] is tier t
        m = col(0.0, 1.0, lo=float(st.spans(j)))
        p = col(-w * (1 - 1 / pi.across_node), inv0, integer=False)
        s = col(w * pi.restart_penalty, 1.0) if st.current[j] is not None else -1
        rows.add_dict(("place", j), {x[k]: 1.0 for k in types}, G, G)
        for k in types:
            rows.add_dict(("node", j, k), {x[k]: 1.0, y[st.node_of[k]]: -st.bound(j, k)}, -np.inf, 0.0)
            if st.tier_of[j][k] >= 1:
                rows.add_dict(("tier", j, k), {x[k]: 1.0, z[st.tier_of[j][k] - 1]: -st.bound(j, k)}, -np.inf, 0.0)
        for t in range(1, len(z)):
            rows.add_dict(("order", j, t + 1), {z[t]: 1.0, z[t - 1]: -1.0}, -np.inf, 0.0)
        for t in range(1, len(z) + 1):
            rows.add_dict(("cover", j, t), {**{x[k]: 1.0 for k in st.at_least(j, t)}, z[t - 1]: -G}, -np.inf, 0.0)
        rows.add_dict(("spread", j), {**{yn: 1.0 for yn in y}, m: -st.spread_max(j)}, -np.inf, 1.0)
        if not st.spans(j):
            for n, yn in enumerate(y):
                rows.add_dict(("onenode", j, n), {**{x[k]: 1.0 for k in st.on_node(n)}, yn: -G, m: G}, 0.0, np.inf)
            alone = st.alone_tiers(j)
            for t in range(1, len(z) + 1):
                rows.add_dict(("alone", j, t), {**{y[n]: 1.0 for n in np.flatnonzero(alone >= t)}, z[t - 1]: -1.0,
                                                m: -(1.0 + st.spread_max(j))}, -np.inf, 0.0)
        rows.add_dict(("lost", j), {p: 1.0, **{z[t]: -d[t] for t in range(len(z))}, m: -inv0}, 0.0, np.inf)
        for k, count in (st.current[j] or {}).items():
            rows.add_dict(("stay", j, k), {x[k]: 1.0, s: -float(count)}, 0.0, np.inf)
        v = {theta: col(0.0, 1.0) for theta in st.job_types(j)}
        for theta, v_col in v.items():
            rows.add_dict(("typed", j, theta), {**{x[k]: 1.0 for k in st.of_type(theta)}, v_col: -G}, -np.inf, 0.0)
        if v:
            rows.add_dict(("onetype", j), dict.fromkeys(v.values(), 1.0), -np.inf, 1.0)
        job_cols.append(JobColumns(tuple(x), tuple(y), tuple(z), m, p, s, tuple(st.tiers[j]), tuple(v.values()),
                                   tuple(st.gpu_types[theta] for theta in v)))
    for k in types:
        rows.add_dict(("cap", k), {cols_j.x[k]: 1.0 for cols_j in job_cols}, -np.inf, float(st.cap[k]))
    twin_groups = st.twin_groups(pi)
    for a, b in (pair for group in twin_groups for pair in zip(group, group[1:])):
        rows.add_dict(("twins", a, b), {**{c: 1.0 for c in job_cols[a].z}, **{c: -1.0 for c in job_cols[b].z}},
                      0.0, np.inf)
    for (members, t), fast in st.scarce_tiers().items():
        need = {j: float(st.need[j]) for j in members}
        rows.add_dict(("scarce", members[0], t), {job_cols[j].z[t - 1]: -g for j, g in need.items()}, -np.inf,
                      fast - sum(need.values()))
        for size, same in st.scarce_sizes(members, fast).items():
            rows.add_dict(("scarce_count", members[0], t, size), {job_cols[j].z[t - 1]: 1.0 for j in same},
                          float(len(same) - fast // size), np.inf)
    c, lo, hi, integer = (np.array(v) for v in zip(*cols)) if cols else (np.zeros(0),) * 4
    A, row_lo, row_hi = stack_rows([rows], num_cols=len(cols))
    arrays = MilpArrays(c.astype(float), offset, A, row_lo, row_hi, lo.astype(float), hi.astype(float),
                        integer.astype(bool))
    return PlacementModel(arrays, st.types, st.nodes, tuple(job_cols), twin_groups, tuple(rows.keys))


def build_pyomo(pi: PlacementInput) -> pyo.ConcreteModel:
    """The same model in Pyomo, term by term as `build` and the module docstring, indexed by names.

    J are job ids, K GPU groups (named by their GPUs, e.g. "n0/2+n0/3"), N node ids, T tiers
    1, 2, ... of a job, JV the (job, GPU type) pairs of the jobs of M; each constraint is a
    component of its tag's name. `columns` lists its
    variables in `build`'s column order, so that a test solves both and compares them.
    """
    import pyomo.environ as pyo  # here, not at the top: rounds solved from arrays never load Pyomo

    st = model_sets(pi)
    jobs, types, nodes = range(len(pi.jobs)), range(len(st.types)), range(len(st.nodes))
    J = [job.id for job in pi.jobs]  # names by index
    K = ["+".join(t) for t in st.types]
    N = list(st.nodes)
    jx, kx, nx = ({name: i for i, name in enumerate(names)} for names in (J, K, N))  # index by name
    weight = [job.weight for job in pi.jobs]
    model = pyo.ConcreteModel(name="placement")
    model.J, model.K, model.N = (pyo.Set(initialize=names, ordered=True) for names in (J, K, N))
    model.JT = pyo.Set(dimen=2, initialize=[(J[j], t) for j in jobs for t in range(1, len(st.tiers[j]))], ordered=True)
    model.S = pyo.Set(initialize=[J[j] for j in jobs if st.current[j] is not None], ordered=True)
    model.JV = pyo.Set(dimen=2, initialize=[(J[j], st.gpu_types[theta]) for j in jobs for theta in st.job_types(j)],
                       ordered=True)
    theta_x = {name: i for i, name in enumerate(st.gpu_types)}

    model.x = pyo.Var(model.J, model.K, domain=pyo.NonNegativeIntegers,
                      bounds=lambda _, j, k: st.x_range(jx[j], kx[k]))  # (pin) in the bounds
    model.y = pyo.Var(model.J, model.N, domain=pyo.Binary,
                      bounds=lambda _, j, n: (0, float(st.usable_node(jx[j], nx[n]))))
    model.z = pyo.Var(model.JT, domain=pyo.Binary)
    model.m = pyo.Var(model.J, domain=pyo.Binary, bounds=lambda _, j: (float(st.spans(jx[j])), 1))
    model.p = pyo.Var(model.J, domain=pyo.NonNegativeReals, bounds=lambda _, j: (0, 1 / st.tiers[jx[j]][0]))
    model.s = pyo.Var(model.S, domain=pyo.Binary)
    model.v = pyo.Var(model.JV, domain=pyo.Binary)
    # the variables by index, as `build` and the docstring write them
    x = {(j, k): model.x[J[j], K[k]] for j in jobs for k in types}
    y = {(j, n): model.y[J[j], N[n]] for j in jobs for n in nodes}
    z = {(j, t): model.z[J[j], t] for j in jobs for t in range(1, len(st.tiers[j]))}
    m, p = [model.m[J[j]] for j in jobs], [model.p[J[j]] for j in jobs]
    s = {j: model.s[J[j]] for j in jobs if st.current[j] is not None}
    v = {(j, theta): model.v[J[j], st.gpu_types[theta]] for j in jobs for theta in st.job_types(j)}

    def inverse_worst(j: int):
        """1/tau_j0 + sum_t d_jt z_jt: 1 / the worst slowdown of job j's GPUs, telescoped."""
        return 1 / st.tiers[j][0] + sum(float(d) * z[j, t] for t, d in enumerate(st.gain(j), start=1))

    def cap(_, k: str):  # with no jobs there is nothing to bound
        return sum(x[j, kx[k]] for j in jobs) <= int(st.cap[kx[k]]) if pi.jobs else pyo.Constraint.Skip

    model.place = pyo.Constraint(model.J, rule=lambda _, j: sum(x[jx[j], k] for k in types) == int(st.need[jx[j]]))
    model.cap = pyo.Constraint(model.K, rule=cap)
    model.node = pyo.Constraint(model.J, model.K, rule=lambda _, j, k: x[jx[j], kx[k]]
                                <= st.bound(jx[j], kx[k]) * y[jx[j], st.node_of[kx[k]]])
    model.tier_index = pyo.Set(dimen=2, initialize=[(J[j], K[k]) for j in jobs for k in types if st.tier_of[j][k] >= 1],
                               ordered=True)
    model.tier = pyo.Constraint(model.tier_index, rule=lambda _, j, k: x[jx[j], kx[k]]
                                <= st.bound(jx[j], kx[k]) * z[jx[j], int(st.tier_of[jx[j]][kx[k]])])
    model.order_index = pyo.Set(dimen=2, initialize=[(j, t) for j, t in model.JT if t >= 2], ordered=True)
    model.order = pyo.Constraint(model.order_index, rule=lambda _, j, t: z[jx[j], t] <= z[jx[j], t - 1])
    model.spread = pyo.Constraint(model.J, rule=lambda _, j: sum(y[jx[j], n] for n in nodes)
                                  <= 1 + st.spread_max(jx[j]) * m[jx[j]])
    model.onenode_index = pyo.Set(dimen=2, initialize=[(J[j], N[n]) for j in jobs if not st.spans(j) for n in nodes],
                                  ordered=True)
    model.onenode = pyo.Constraint(model.onenode_index, rule=lambda _, j, n: sum(
        x[jx[j], k] for k in st.on_node(nx[n])) >= int(st.need[jx[j]]) * (y[jx[j], nx[n]] - m[jx[j]]))
    model.lost = pyo.Constraint(model.J, rule=lambda _, j: p[jx[j]] >= inverse_worst(jx[j])
                                - (1 - m[jx[j]]) / st.tiers[jx[j]][0])
    current = {j: cur for j, cur in enumerate(st.current) if cur is not None}  # the jobs of S
    model.stay_index = pyo.Set(dimen=2, initialize=[(J[j], K[k]) for j in current for k in current[j]], ordered=True)
    model.stay = pyo.Constraint(model.stay_index, rule=lambda _, j, k: x[jx[j], kx[k]]
                                >= current[jx[j]][kx[k]] * s[jx[j]])

    model.typed = pyo.Constraint(model.JV, rule=lambda _, j, theta: sum(
        x[jx[j], int(k)] for k in st.of_type(theta_x[theta])) <= int(st.need[jx[j]]) * v[jx[j], theta_x[theta]])
    model.onetype = pyo.Constraint(pyo.Set(initialize=list(dict.fromkeys(j for j, _ in model.JV)), ordered=True),
                                   rule=lambda _, j: sum(v[jx[j], theta] for theta in st.job_types(jx[j])) <= 1)

    model.cover = pyo.Constraint(model.JT, rule=lambda _, j, t: sum(x[jx[j], int(k)] for k in st.at_least(jx[j], t))
                                 <= int(st.need[jx[j]]) * z[jx[j], t])
    alone = {j: st.alone_tiers(j) for j in jobs if not st.spans(j)}
    model.alone_index = pyo.Set(dimen=2, initialize=[(J[j], t) for j in alone for t in range(1, len(st.tiers[j]))],
                                ordered=True)
    model.alone = pyo.Constraint(model.alone_index, rule=lambda _, j, t: z[jx[j], t] >= sum(
        y[jx[j], int(n)] for n in np.flatnonzero(alone[jx[j]] >= t)) - (1 + st.spread_max(jx[j])) * m[jx[j]])

    def tiers_of(j: int) -> range:
        return range(1, len(st.tiers[j]))

    model.twins_index = pyo.Set(dimen=2, initialize=[(J[a], J[b]) for a, b in st.twins(pi)], ordered=True)
    model.twins = pyo.Constraint(model.twins_index, rule=lambda _, a, b: sum(z[jx[a], t] for t in tiers_of(jx[a]))
                                 >= sum(z[jx[b], t] for t in tiers_of(jx[b])))
    # (scarce) rows are indexed by their class's first job and the tier; (scarce_count) also by the size
    scarce = {(J[members[0]], t): (members, fast) for (members, t), fast in st.scarce_tiers().items()}
    model.scarce_index = pyo.Set(dimen=2, initialize=list(scarce), ordered=True)
    model.scarce = pyo.Constraint(model.scarce_index, rule=lambda _, c, t: sum(
        int(st.need[j]) * (1 - z[j, t]) for j in scarce[c, t][0]) <= scarce[c, t][1])
    counts = {(c, t, g): (same, fast) for (c, t), (members, fast) in scarce.items()
              for g, same in st.scarce_sizes(members, fast).items()}
    model.scarce_count_index = pyo.Set(dimen=3, initialize=list(counts), ordered=True)
    model.scarce_count = pyo.Constraint(model.scarce_count_index, rule=lambda _, c, t, g: sum(
        1 - z[j, t] for j in counts[c, t, g][0]) <= counts[c, t, g][1] // g)

    speed = sum(weight[j] * (inverse_worst(j) - (1 - 1 / pi.across_node) * p[j]) for j in jobs)
    restart = sum(weight[j] * pi.restart_penalty * (1 - (s[j] if j in s else 0))
                  for j in jobs if pi.jobs[j].current_gpus)
    model.obj = pyo.Objective(expr=speed - restart, sense=pyo.maximize)
    model.columns = [var for j in jobs for var in (
        *(x[j, k] for k in types), *(y[j, n] for n in nodes), *(z[j, t] for t in range(1, len(st.tiers[j]))),
        m[j], p[j], *((s[j],) if j in s else ()), *(v[j, theta] for theta in st.job_types(j)))]
    return model


def point(pi: PlacementInput, model: PlacementModel, placement: Mapping[str, tuple[str, ...]]) -> np.ndarray:
    """The model's column values for a concrete placement: a warm start, e.g. PAL's greedy.

    The twins' GPUs are first exchanged as (twins) orders them (`twins_ordered`): the same
    placement up to the twins' names, and so a point of the model. x counts the GPUs of each
    group, y the nodes used, z the tiers at or below the worst (effective slowdown), m whether
    it spans nodes, p = m / tau_worst, s whether a running job keeps its GPUs, v its GPUs' type.
    A start that breaks a row is dropped by the solver.
    """
    placement = twins_ordered(pi, model, placement)
    v = np.zeros(model.arrays.num_cols)
    group_of = _group_of(model.types)
    for job, cols in zip(pi.jobs, model.jobs):
        gpu_ids = placement[job.id]
        for g in gpu_ids:
            v[cols.x[group_of[g]]] += 1
        used = {pi.gpu_index[g].node for g in gpu_ids}
        for n, c in zip(model.nodes, cols.y):
            v[c] = float(n in used)
        worst = max(effective_slowdown(job, pi.gpu_index[g]) for g in gpu_ids)
        for t, c in enumerate(cols.z, start=1):
            v[c] = float(round(worst, 9) >= cols.tiers[t])
        v[cols.m] = float(len(used) > 1)
        v[cols.p] = v[cols.m] / worst
        if cols.s >= 0:
            v[cols.s] = float(not job.moved_to(gpu_ids))
        for c, gpu_type in zip(cols.v, cols.v_types):
            v[c] = float(any(pi.gpu_index[g].gpu_type == gpu_type for g in gpu_ids))
    return v


def twins_ordered(pi: PlacementInput, model: PlacementModel,
                  placement: Mapping[str, tuple[str, ...]]) -> Mapping[str, tuple[str, ...]]:
    """The placement with each group of twins holding its GPU sets in decreasing worst slowdown."""
    if not model.twin_groups:
        return placement
    out = dict(placement)
    for group in model.twin_groups:
        jobs = [pi.jobs[j] for j in group]
        worst = [max(round(effective_slowdown(job, pi.gpu_index[g]), 9) for g in placement[job.id]) for job in jobs]
        order = sorted(range(len(jobs)), key=lambda i: -worst[i])
        for job, i in zip(jobs, order):
            out[job.id] = placement[jobs[i].id]
    return out


def _group_of(types) -> dict[str, int]:
    return {g: k for k, ids in enumerate(types) for g in ids}


def _current_counts(job: PlacementJob, group_of: dict[str, int]) -> dict[int, int] | None:
    """Group -> current GPUs of a running job, if it could stay (all its GPUs offered)."""
    if not job.current_gpus or len(job.current_gpus) != job.num_gpus:
        return None
    if any(g not in group_of for g in job.current_gpus):
        return None
    return dict(Counter(group_of[g] for g in job.current_gpus))


def decode(pi: PlacementInput, model: PlacementModel, values: np.ndarray) -> dict[str, tuple[str, ...]]:
    """The placement of a point of the model: its counts per group made concrete GPUs.

    x_jk GPUs of group k go to job j; a job keeps its current GPUs where its counts allow (so a
    job that can stay does), and takes the rest of its count from the group's free GPUs in
    order. Each job's GPU ids are sorted.
    """
    free = [list(ids) for ids in model.types]
    counts = {(j, k): int(round(values[c])) for (j, k), c in model.x_cols.items()}
    taken: dict[int, list[str]] = {j: [] for j in range(len(pi.jobs))}
    for j, job in enumerate(pi.jobs):  # current GPUs first, so a job that can stay does
        for k, ids in enumerate(free):
            keep = [g for g in job.current_gpus if g in ids][: counts[(j, k)]]
            for g in keep:
                ids.remove(g)
            taken[j] += keep
            counts[(j, k)] -= len(keep)
    for (j, k), n in counts.items():
        taken[j] += free[k][:n]
        del free[k][:n]
    return {job.id: tuple(sorted(taken[j])) for j, job in enumerate(pi.jobs)}

