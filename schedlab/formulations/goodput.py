r"""Goodput maximization with p-mean fairness: Pollux's objective as Sia's configuration MILP.

Follows Pollux (Qiao et al., OSDI'21: goodput, power-mean fairness of speedups, restart
factor) and Sia (Jayaram Subramanya et al., SOSP'23: one binary per job configuration,
unallocated penalty). What we changed: the configuration shapes of options.py, and an exact
capacity model for them that also lets running jobs stay on their exact GPUs (below).

**Sets**

- $J$ jobs; $C_j$ candidate options of job $j$ (options.py); $C = \bigcup_j C_j$
- $\mathit{Grp}$ node groups (GPU type, $G$ GPUs per node); $K_g$ nodes of group $g$
- $L_g$ divisibility chain of group $g$'s single-node sizes, e.g. $\{1, 2, 4\}$
- $\mathit{Stay}$ stay options (a running job keeps its exact GPUs); $S_k$ those holding
  GPUs on node $k$; $K1_g$ / $K2_g$ nodes of $g$ with exactly one / several
- $\mathit{New}_g$ non-stay options placed in group $g$

**Parameters**

- $u_c$ utility of option $c$ (options.utility of its penalized speedup $s'_c$)
- $U0_j$ utility of leaving job $j$ unallocated; $s'_c$ penalized speedup (max-min)
- $a_c$ GPUs of option $c$; $z_c$ GPUs per node of $c$ ($a_c$ on one node, $G$ for whole nodes)
- $h_{kc}$ GPUs stay option $c$ holds on node $k$

**Variables**

- $x_c \in \{0, 1\}$: option $c$ is chosen
- $w_{kd} \in \mathbb{Z}_{\ge 0}$: $d$-sized slots left free on a node with several stayers,
  $k \in K2_g$
- $0 \le t \le \max s'$ (max-min only): the smallest speedup; $t = 0$ when $|J| >$ GPUs

**Objective**

$$
\begin{aligned}
p > -\infty: &\quad \max \; \sum_j U0_j + \sum_c \bigl(u_c - U0_{j(c)}\bigr) \, x_c \\
p = -\infty: &\quad \max \; M t + [\text{the } p = 1 \text{ objective}], \qquad M = 1000 \, |J|
\end{aligned}
$$

(max-min, ties broken by total utility; the same as $t + \epsilon \cdot [\dots]$ with
$\epsilon = 1/M$, but with $\epsilon \approx 10^{-4}$ HiGHS 1.12 stopped up to $10^{-4}$ short
of the optimum on tiny rounds: its absolute tolerances swallowed the tie-break)

**Constraints**

$$
\begin{aligned}
&\text{(one)}    && \sum_{c \in C_j} x_c \le 1
                 && j \in J \\
&\text{(level)}  && \sum_{c \in \mathit{New}_g,\ z_c \ge d} \frac{a_c}{d} \, x_c
                    + \sum_{k \in K1_g} \sum_{c \in S_k} \left\lceil \frac{h_{kc}}{d} \right\rceil x_c
                    - \sum_{k \in K2_g} w_{kd} \le |K_g \setminus K2_g| \, \frac{G}{d}
                 && g \in \mathit{Grp},\ d \in L_g \\
&\text{(slots)}  && d \, w_{kd} + \sum_{c \in S_k} h_{kc} \, x_c \le G
                 && k \in K2_g,\ d \in L_g \\
&\text{(minspd)} && t \le \sum_{c \in C_j} s'_c \, x_c
                 && j \in J \text{ (max-min)} \\
&\text{(pin)}    && x_c = 1
                 && c \in \mathit{Stay} \text{ of a pinned job}
\end{aligned}
$$

(pin) holds a pinned job on its current GPUs: its stay is its only option
(options.pinned_stays), a column bound rather than a row.

**Why (level) is exact.** Let $r_k$ be node $k$'s GPUs not held by stayers. Items whose sizes
form a divisibility chain pack into nodes with free $r_k$ iff for every level $d$ the items of
size $\ge d$ need at most $\sum_k \lfloor r_k / d \rfloor$ slots of size $d$ (necessity: such
items are multiples of $d$; sufficiency: largest-first placement, see packing.py).
$\lfloor r_k / d \rfloor$ is $G/d$ for a node without stayers,
$G/d - \lceil h/d \rceil \, x$ for a node with one (linear, since $d \mid G$), and $w_{kd}$,
bounded by (slots), for a node with several. Decoding therefore never fails; the verifier
checks anyway.

**Decoupled rounds.** Drop every row but (one) and each job takes its own best option (its
pinned stay, else the first of its largest positive $u_c - U0_j$, else none), and $t$ its
bound; that point bounds every other. It is feasible, so optimal, exactly when its options
pack and, under max-min, every job's $s'_c$ at it reaches $t$'s bound: (level) holds at it
with $w_{kd} = \lfloor r_k / d \rfloor$, which (slots) allows, exactly when they pack
(above). `decoupled_point` decides it from the options (solvers.outcome.decoupled_optimum's
point, found without the arrays, where that check answers). A round of a few jobs on a large
cluster is one, and its arrays cost a quarter of it.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from functools import cached_property
from itertools import chain, groupby
from operator import itemgetter
from typing import TYPE_CHECKING

import numpy as np

from schedlab.errors import DecodeError
from schedlab.formulations.freezing import enumerate_freeze_options, has_freezing
from schedlab.formulations.greedy import greedy_choice, max_min_choice
from schedlab.formulations.options import (
    OptionColumns,
    OptionSet,
    enumerate_options,
    job_allocations,
    pinned_stays,
)
from schedlab.formulations.packing import NodeState
from schedlab.milp import OPTIMAL, MilpArrays, OneModel, Rows, SolveOutcome, one_row_choice, stack_rows
from schedlab.state import GpuRef, JobAllocation, RoundInput

if TYPE_CHECKING:
    import pyomo.environ as pyo

__all__ = ["GoodputModel", "allocation_objective", "build_arrays", "build_pyomo", "decode", "decoupled_choice",
           "decoupled_point", "goodput_model", "max_min_upper", "max_min_weight", "min_job_speedup", "objective_value",
           "option_labels", "placed", "start_point"]


@dataclass(frozen=True)
class Structure:
    """Index sets shared by the array and the Pyomo builds, so both are the same model."""

    item_size: np.ndarray  # z_c (0 for stay options)
    k1: tuple[np.ndarray, np.ndarray, np.ndarray]  # (k, c, h_kc): each node k of K1, its one stayer c and h_kc; c's together
    multi_stayer: dict[int, list[tuple[int, int]]]  # k in K2 -> [(c, h_kc)]
    node_group: np.ndarray  # each node's group (-1: a node without GPUs)


def max_min_weight(opts: OptionColumns) -> float:
    """M in max M t + utility: one unit of t outweighs any utility difference."""
    return 1e3 * max(opts.num_jobs, 1)


def structure(opts: OptionSet) -> Structure:
    """The index sets of the module docstring: z_c, the nodes of K1 and K2 with their stayers' h_kc, each node's group."""
    # every (node k, stay option c, h_kc) a stayer holds, stayer by stayer, each in its nodes' order
    stayers = opts.stay_nodes
    per_stayer = [len(counts) for counts in stayers.values()]
    node = np.fromiter(chain.from_iterable(stayers.values()), dtype=np.int64, count=sum(per_stayer))
    held = np.fromiter(chain.from_iterable(counts.values() for counts in stayers.values()), dtype=np.int64,
                       count=len(node))
    option = np.repeat(np.array([opts.stay_option(j) for j in stayers], dtype=np.int64), per_stayer)
    holders = np.bincount(node, minlength=1)[node]  # stayers on each entry's node
    alone = holders == 1  # a stay option's nodes of K1 come together: the nodes it alone holds, in its order
    multi_stayer: dict[int, list[tuple[int, int]]] = {}
    for k, c, h in zip(*(a[~alone].tolist() for a in (node, option, held))):
        multi_stayer.setdefault(k, []).append((c, h))
    cluster = opts.round_input.cluster
    return Structure(
        item_size=opts.item_size,
        k1=(node[alone], option[alone], held[alone]),
        multi_stayer=multi_stayer,
        node_group=cluster.derive(_NODE_GROUP, lambda: _node_group(opts)),
    )


def _node_group(opts: OptionSet) -> np.ndarray:
    groups = np.full(len(opts.round_input.cluster.nodes), -1, dtype=np.int64)
    for g, grp in enumerate(opts.groups):
        groups[list(grp.nodes)] = g
    return groups


_NODE_GROUP = "formulations.goodput: each node's group"  # Cluster.derived's key (the groups: options.node_groups, per cluster)


def max_min_upper(opts: OptionColumns) -> float:
    """Upper bound of t. With more jobs than GPUs some job gets nothing, so t = 0: fixing it
    spares the solver an LP bound that spreads fractional GPUs over every job."""
    if opts.num_jobs > opts.round_input.cluster.total_gpus:
        return 0.0
    return float(opts.penalized_speedup.max(initial=0.0))


def _objective_coefficients(opts: OptionColumns) -> tuple[np.ndarray, float]:
    """Coefficients of x and the constant of the p-mean objective (max-min's tie-break)."""
    return opts.utility - opts.U0[opts.job], float(opts.U0.sum())


def build_arrays(opts: OptionSet, st: Structure | None = None) -> MilpArrays:
    """The model above as arrays for highspy and CP-SAT. Columns: x, then w, then t; (one) comes
    first, the `one_rows`. `st`: the options' structure, where the caller has it."""
    st = st if st is not None else structure(opts)
    n = opts.num_options
    w_cols = _w_columns(opts, st)
    w_index = {kd: n + i for i, kd in enumerate(w_cols)}
    max_min = opts.round_input.settings.max_min
    t_col = n + len(w_cols) if max_min else None
    num_cols = n + len(w_cols) + (1 if max_min else 0)

    inf = math.inf
    one, level, slots, minspd = Rows(), Rows(), Rows(), Rows()
    has = np.zeros(opts.num_jobs, dtype=bool)  # (one): a row per job with options, in job order
    has[opts.job] = True
    one.extend([(j,) for j in np.flatnonzero(has).tolist()], (np.cumsum(has) - 1)[opts.job], np.arange(n), np.ones(n),
               -inf, 1.0)
    k1_node, k1_option, k1_held = st.k1
    k1_group = st.node_group[k1_node]
    for g, grp in enumerate(opts.groups):  # (level)
        nodes_k2 = [k for k in sorted(st.multi_stayer) if st.node_group[k] == g]  # in grp.nodes's order
        # the K1 term, one entry per stay option: its ceil(h_kc / d) summed over its nodes of K1_g,
        # at every level at once (a stay option's entries come together: Structure.k1)
        option, h = k1_option[k1_group == g], k1_held[k1_group == g]
        first = np.flatnonzero(option != np.concatenate(([-1], option[:-1])))  # not np.diff's prepend: ~3 us a group
        node_slots = -(-h[:, None] // np.array(grp.levels))  # ceil(h_kc / d), a node a row, a level a column
        held_slots = np.add.reduceat(node_slots, first, axis=0) if len(first) else node_slots
        for i, d in enumerate(grp.levels):
            new = np.flatnonzero((opts.group == g) & (st.item_size >= d))
            col = np.concatenate([new, option[first], [w_index[k, d] for k in nodes_k2]])
            val = np.concatenate([opts.num_gpus[new] / d, held_slots[:, i], -np.ones(len(nodes_k2))])
            level.add((g, d), col, val, -inf, (len(grp.nodes) - len(nodes_k2)) * grp.gpus_per_node / d)
    _slots_rows(opts, st, w_index, slots)
    if max_min:  # (minspd): t - sum_c s'_c x_c <= 0 for every job
        J = opts.num_jobs
        minspd.extend([(j,) for j in range(J)], np.concatenate([np.arange(J), opts.job]),
                      np.concatenate([np.full(J, t_col), np.arange(n)]),
                      np.concatenate([np.ones(J), -opts.penalized_speedup]), -inf, 0.0)

    coef, offset = _objective_coefficients(opts)
    c = np.zeros(num_cols)
    c[:n] = coef
    col_lo, col_hi = np.zeros(num_cols), np.ones(num_cols)
    col_lo[pinned_stays(opts)] = 1.0  # (pin)
    for (k, d), i in w_index.items():
        col_hi[i] = opts.groups[st.node_group[k]].gpus_per_node // d
    integer = np.ones(num_cols, dtype=bool)
    if max_min:
        c[t_col] = max_min_weight(opts)
        col_hi[t_col] = max_min_upper(opts)
        integer[t_col] = False
    A, row_lo, row_hi = stack_rows([one, level, slots, minspd], num_cols)
    return MilpArrays(
        c=c, offset=offset, A=A, row_lo=row_lo, row_hi=row_hi,
        col_lo=col_lo, col_hi=col_hi, integer=integer,
        start=start_point(opts, st), choice=np.concatenate([opts.job, np.full(num_cols - n, -1)]),
        one_rows=np.arange(len(one)),
    )


def _slots_rows(opts: OptionSet, st: Structure, w_index: dict[tuple[int, int], int], slots: Rows) -> None:
    """(slots): d w_kd + sum_c h_kc x_c <= G for every node k of K2 and level d, in one block
    (a row at a time cost ~5 us each, 1.4 ms for the 280 rows of a 2,048-GPU round)."""
    keys: list[tuple] = []
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    hi: list[int] = []
    for k, holders in sorted(st.multi_stayer.items()):
        grp = opts.groups[st.node_group[k]]
        for d in grp.levels:
            rows += [len(keys)] * (1 + len(holders))
            cols += [w_index[k, d]] + [c for c, _ in holders]
            vals += [d] + [h for _, h in holders]
            keys.append((k, d))
            hi.append(grp.gpus_per_node)
    slots.extend(keys, np.array(rows, dtype=int), np.array(cols, dtype=int), np.array(vals, dtype=float), -math.inf,
                 np.array(hi, dtype=float))


def min_job_speedup(opts: OptionColumns, x: np.ndarray) -> float:
    """min_j sum_c s'_c x_c: the smallest penalized speedup of any job (0 if some job has none)."""
    per_job = np.zeros(opts.num_jobs)
    np.add.at(per_job, opts.job, opts.penalized_speedup * x)
    return float(per_job.min()) if len(per_job) else 0.0


def _w_columns(opts: OptionSet, st: Structure) -> list[tuple[int, int]]:
    """(node, level) of every w variable, in column order."""
    return [(k, d) for k in sorted(st.multi_stayer) for d in opts.groups[st.node_group[k]].levels]


def start_point(opts: OptionSet, st: Structure | None = None) -> np.ndarray:
    """Every running job stays where it is: feasible, and usually near-optimal (warm start).
    In the array layout: x, then w in (node, level) order, then t under max-min."""
    st = st if st is not None else structure(opts)
    w_cols = _w_columns(opts, st)
    max_min = opts.round_input.settings.max_min
    t_col = opts.num_options + len(w_cols) if max_min else None
    v = np.zeros(opts.num_options + len(w_cols) + (1 if max_min else 0))
    v[[opts.stay_option(j) for j in opts.stay_nodes]] = 1.0
    for i, (k, d) in enumerate(w_cols):
        G = opts.groups[st.node_group[k]].gpus_per_node
        v[opts.num_options + i] = (G - sum(h for _, h in st.multi_stayer[k])) // d
    if t_col is not None:
        v[t_col] = min_job_speedup(opts, v[: opts.num_options])
    return v


def option_labels(opts: OptionSet) -> list[tuple[str, str]]:
    """(job id, option) of every column of x: "stay" for a stay option, else the shape, e.g.
    "g0/2n/8gpu" (group 0, 2 nodes, 8 GPUs); readable names for the Pyomo model and LP files."""
    ids = [job.id for job in opts.round_input.jobs]
    return [(ids[j], "stay" if g < 0 else f"g{g}/{n}n/{r}gpu")
            for j, g, n, r in zip(opts.job.tolist(), opts.group.tolist(), opts.num_nodes.tolist(), opts.num_gpus.tolist())]


def build_pyomo(opts: OptionSet) -> pyo.ConcreteModel:
    """The same model in Pyomo, written term by term as in the module docstring, indexed by
    names: x[job id, option] (option_labels), w[node id, d], (one) and (minspd) by job id. The
    parameters a customization reads are on the model too: gpus[c] (a_c), nodes[c], speedup[c]
    (s'_c) and utility[c] (u_c) over C, the (job id, option) pairs."""
    import pyomo.environ as pyo  # here, not at the top: rounds solved from arrays never load Pyomo

    st = structure(opts)
    coef, offset = _objective_coefficients(opts)
    labels = option_labels(opts)
    node_id = [n.id for n in opts.round_input.cluster.nodes]
    job_id = [job.id for job in opts.round_input.jobs]
    m = pyo.ConcreteModel(name="goodput")
    m.J = pyo.Set(initialize=[job_id[j] for j in sorted(set(opts.job.tolist()))], ordered=True)
    m.C = pyo.Set(dimen=2, initialize=labels, ordered=True)
    m.GL = pyo.Set(dimen=2, initialize=[(g, d) for g, grp in enumerate(opts.groups) for d in grp.levels])
    m.K2L = pyo.Set(dimen=2, initialize=[(node_id[k], d) for k, d in _w_columns(opts, st)], ordered=True)

    m.gpus = pyo.Param(m.C, initialize=dict(zip(labels, opts.num_gpus.tolist())))
    m.nodes = pyo.Param(m.C, initialize=dict(zip(labels, opts.num_nodes.tolist())))
    m.speedup = pyo.Param(m.C, initialize=dict(zip(labels, opts.penalized_speedup.tolist())))
    m.utility = pyo.Param(m.C, initialize=dict(zip(labels, opts.utility.tolist())))
    m.x = pyo.Var(m.C, domain=pyo.Binary)
    m.w = pyo.Var(m.K2L, domain=pyo.NonNegativeIntegers)
    x = [m.x[c] for c in labels]  # x_c by column
    for c in pinned_stays(opts).tolist():  # (pin)
        x[c].setlb(1)
    node_index = {n: k for k, n in enumerate(node_id)}

    options_of = {job_id[j]: np.flatnonzero(opts.job == j).tolist() for j in sorted(set(opts.job.tolist()))}
    m.one = pyo.Constraint(m.J, rule=lambda m, j: sum(x[c] for c in options_of[j]) <= 1)

    def level(m, g, d):
        grp = opts.groups[g]
        new = [opts.num_gpus[c] / d * x[c] for c in np.flatnonzero(opts.group == g) if st.item_size[c] >= d]
        held = [math.ceil(h / d) * x[c] for k, c, h in zip(*(a.tolist() for a in st.k1)) if st.node_group[k] == g]
        k2 = [k for k in grp.nodes if k in st.multi_stayer]
        if not (new or held or k2):
            return pyo.Constraint.Skip  # nothing of size >= d in the group: 0 <= capacity holds
        free = sum(m.w[node_id[k], d] for k in k2)
        return sum(new) + sum(held) - free <= (len(grp.nodes) - len(k2)) * grp.gpus_per_node / d

    m.level = pyo.Constraint(m.GL, rule=level)

    def slots(m, node, d):
        k = node_index[node]
        G = opts.groups[st.node_group[k]].gpus_per_node
        return d * m.w[node, d] + sum(h * x[c] for c, h in st.multi_stayer[k]) <= G

    m.slots = pyo.Constraint(m.K2L, rule=slots)

    p_mean = offset + sum(coef[c] * x[c] for c in range(opts.num_options))
    if opts.round_input.settings.max_min:
        m.t = pyo.Var(domain=pyo.NonNegativeReals, bounds=(0, max_min_upper(opts)))
        all_jobs = [job.id for job in opts.round_input.jobs]
        m.minspd = pyo.Constraint(all_jobs, rule=lambda m, j: m.t <= sum(
            opts.penalized_speedup[c] * x[c] for c in options_of.get(j, [])))
        m.obj = pyo.Objective(expr=max_min_weight(opts) * m.t + p_mean, sense=pyo.maximize)
    else:
        m.obj = pyo.Objective(expr=p_mean, sense=pyo.maximize)
    m.columns = x + [m.w[kd] for kd in m.K2L] + ([m.t] if hasattr(m, "t") else [])
    return m


def objective_value(opts: OptionColumns, chosen: np.ndarray) -> float:
    """The model's objective for a set of chosen options (a boolean mask over options); any
    option set with utility, U0, job and penalized_speedup (the joint model's too)."""
    coef, offset = _objective_coefficients(opts)
    value = offset + float(coef @ chosen)
    if opts.round_input.settings.max_min:
        value += max_min_weight(opts) * min_job_speedup(opts, chosen)
    return value


def decode(opts: OptionSet, chosen: np.ndarray,
           gpus_of: dict[int, tuple[GpuRef, ...]] | None = None) -> tuple[JobAllocation, ...]:
    """Concrete GPUs for every job from the chosen options (`placed`, unless their placement
    `gpus_of` is given), with their batches."""
    return job_allocations(opts, np.flatnonzero(chosen), gpus_of if gpus_of is not None else placed(opts, chosen))


def placed(opts: OptionSet, chosen: np.ndarray) -> dict[int, tuple[GpuRef, ...]]:
    """{option: its concrete GPUs} of the chosen options, stayers first, then largest first;
    DecodeError where they do not pack."""
    jobs = opts.round_input.jobs
    state = NodeState(opts.round_input.cluster)
    picked = np.flatnonzero(chosen)
    gpus_of: dict[int, tuple[GpuRef, ...]] = {}
    stays = picked[opts.stay[picked]]
    for c, j in zip(stays.tolist(), opts.job[stays].tolist()):
        if not state.take_exact(jobs[j].current_gpus):
            raise DecodeError(f"job {jobs[j].id!r} cannot stay: its GPUs are taken")
        gpus_of[c] = jobs[j].current_gpus
    item_size = opts.item_size
    new = picked[~opts.stay[picked]]
    new = new[np.lexsort((new, -opts.num_gpus[new], -item_size[new]))]  # largest first
    # a run of options of one shape in one group is taken at once (NodeState.take_shapes)
    for (g, n, z), run in groupby(zip(opts.group[new].tolist(), opts.num_nodes[new].tolist(), item_size[new].tolist(),
                                      new.tolist()), key=itemgetter(0, 1, 2)):
        options = [c for *_, c in run]
        taken = state.take_shapes(opts.groups[g].nodes, n, z, len(options))
        if len(taken) < len(options):
            c = options[len(taken)]
            raise DecodeError(f"no room for job {jobs[opts.job[c]].id!r} ({opts.num_gpus[c]} GPUs)")
        gpus_of.update(zip(options, taken))
    return gpus_of


def decoupled_choice(opts: OptionSet) -> np.ndarray:
    """The options the jobs take with every row but (one) dropped, a mask: each job's pinned stay,
    else the first of its options of the largest positive u_c - U0_j, else none (milp.one_row_choice)."""
    worth, _ = _objective_coefficients(opts)
    worth[pinned_stays(opts)] = np.inf  # (pin)
    chosen = np.zeros(opts.num_options, dtype=bool)
    chosen[one_row_choice(opts.job, worth, opts.num_jobs)] = True
    return chosen


def decoupled_point(opts: OptionSet) -> tuple[np.ndarray, dict[int, tuple[GpuRef, ...]]] | None:
    """The decoupled choice where it is the optimum (module docstring, "Decoupled rounds"), and
    its placement (`placed`), which proves it; None for a round without options, or where it is
    not: its options need more GPUs than the cluster has or do not pack, or under max-min some
    job's speedup at it is below t's bound (max_min_upper)."""
    if not opts.num_options:
        return None
    chosen = decoupled_choice(opts)
    if opts.num_gpus[chosen].sum() > opts.round_input.cluster.total_gpus:  # a contended round, at once
        return None
    if opts.round_input.settings.max_min and min_job_speedup(opts, chosen) < max_min_upper(opts):  # (minspd)
        return None
    try:
        return chosen, placed(opts, chosen)
    except DecodeError:
        return None


@dataclass(frozen=True)
class GoodputModel(OneModel):
    """The round model above over an OptionSet (a schedlab.milp.RoundModel)."""

    opts: OptionSet
    # the placement that proved the decoupled point (by its mask's bytes), which decoding it reads
    _placements: dict[bytes, dict[int, tuple[GpuRef, ...]]] = field(default_factory=dict, compare=False, repr=False)

    @property
    def round_input(self) -> RoundInput:
        """The round the options were enumerated from."""
        return self.opts.round_input

    @cached_property
    def st(self) -> Structure:
        """The options' index sets (`structure`), found once for the arrays and the start."""
        return structure(self.opts)

    def arrays(self) -> MilpArrays:
        """The model as arrays (`build_arrays`), warm-started where every running job stays."""
        return build_arrays(self.opts, self.st)

    def pyomo(self) -> pyo.ConcreteModel:
        """The same model in Pyomo (`build_pyomo`)."""
        return build_pyomo(self.opts)

    def start(self) -> np.ndarray:
        """Every running job stays (`start_point`), in the array layout."""
        return start_point(self.opts, self.st)

    def chosen(self, values: np.ndarray) -> np.ndarray:
        """The options a point chooses: a mask of its x columns above 1/2."""
        return np.asarray(values[: self.opts.num_options]) > 0.5

    def decode(self, values: np.ndarray) -> tuple[JobAllocation, ...]:
        """Concrete GPUs and batches of the chosen options (`decode`); DecodeError if they do not pack."""
        chosen = self.chosen(values)
        return decode(self.opts, chosen, self._placements.get(chosen.tobytes()))

    def decoupled(self) -> SolveOutcome | None:
        """The decoupled optimum without the arrays (milp.Decouples, `decoupled_point`)."""
        t0 = time.perf_counter()
        found = decoupled_point(self.opts)
        if found is None:
            return None
        chosen, placement = found
        self._placements[chosen.tobytes()] = placement
        values = chosen.astype(float)
        objective = self.objective(values)
        return SolveOutcome(OPTIMAL, values, objective, objective, time.perf_counter() - t0,
                            "decoupled: each job's best option, and they pack")

    def objective(self, values: np.ndarray) -> float:
        """The model's objective at the chosen options (`objective_value`)."""
        return objective_value(self.opts, self.chosen(values))

    def fallback(self) -> np.ndarray:
        """x from the greedy (formulations.greedy), under max-min the better of it and the floor
        at which every job is served (max_min_choice); w and t are not needed to decode."""
        values = np.zeros(self.opts.num_options)
        values[greedy_choice(self.opts)] = 1.0
        if self.round_input.settings.max_min and (served := max_min_choice(self.opts)) is not None:
            floor = served.astype(float)
            if self.objective(floor) > self.objective(values):
                return floor
        return values


def goodput_model(round_input: RoundInput) -> GoodputModel:
    """The goodput round, with freeze levels folded in when a job opts in to freezing."""
    opts = enumerate_freeze_options(round_input) if has_freezing(round_input) else enumerate_options(round_input)
    return GoodputModel(opts)


def allocation_objective(opts: OptionSet, allocations: tuple[JobAllocation, ...]) -> float:
    """The model's objective for any allocation of the round (e.g. a partitioned answer):
    each job's allocation read as its option (staying, or a group's shape); opts should be
    enumerated with prune=False so that every shape is there. KeyError if a shape is not."""
    ri = opts.round_input
    node_group = {ri.cluster.nodes[k].id: g for g, grp in enumerate(opts.groups) for k in grp.nodes}
    index = {(int(j), int(g), int(n), int(r)): c
             for c, (j, g, n, r) in enumerate(zip(opts.job, opts.group, opts.num_nodes, opts.num_gpus))}
    chosen = np.zeros(opts.num_options, dtype=bool)
    for j, (job, alloc) in enumerate(zip(ri.jobs, allocations)):
        if not alloc.gpus:
            continue
        stays = set(alloc.gpus) == set(job.current_gpus)
        group = -1 if stays else node_group[alloc.gpus[0].node]
        chosen[index[j, group, alloc.num_nodes, alloc.num_gpus]] = True
    return objective_value(opts, chosen)
