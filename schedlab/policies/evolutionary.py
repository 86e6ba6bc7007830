"""ONES-style online evolutionary search over whole-cluster schedules (Bian et al., SC'21).

A schedule gives every GPU slot (node-major) to one job or to none. One generation:

1. uniform crossover: parents are paired at random; with probability `crossover_rate` a pair
   exchanges each slot with probability 1/2;
2. preemption mutation: with probability `mutation_rate` a child loses all the slots of one
   random job, except jobs younger than `young_s` (ONES: two epochs);
3. padding: free slots go to waiting jobs, oldest first, one each, then to the running
   jobs with the fewest slots, each up to its next configuration size within its growth
   cap (ONES: the request, doubled every `young_s` of age, at most max_gpus). Every
   candidate is padded (work-conserving, as in ONES), the surviving schedules of the last
   round and the running schedule itself included, and padding runs again after the
   reorder so that slots it freed do not sit idle;
4. reorder (repair): each job's slot count becomes one configuration of the round's option
   set (formulations.options): its exact current GPUs if the largest shape its slots allow
   is the size it holds now (wherever the slots are: a slot's position is only a placement
   hint) or the job is pinned (JobSpec.pinned: it always stays), else the largest shape that
   fits its count; configurations are placed stayers
   first, then largest first, on the node holding most of the job's slots (fewest moves);
   jobs that no longer fit drop;
5. selection: the best `population` of parents and children survive.

A round starts from the running schedule, last round's survivors, and random schedules up to
`population` (all padded and reordered).
The population is kept across rounds (online): a schedule survives by job id, slots of jobs
that left become free. Everything random comes from one seeded numpy Generator.

Values. Each configuration c of job j is valued under a batch rule: "linear" (ONES: total
batch = the user's per-GPU batch x GPUs, within [init_bsz, max_bsz]: linear learning-rate
scaling up to a cap) or
"best" (the goodput model's best batch, as the MILP). Two fitness functions, both maximized:

- "milp": sum_j U(s'_jc) (U0_j if unallocated): exactly the goodput MILP's objective, so that
  with batch rule "best" the search and the MILP value the same configuration space and
  the MILP optimum is an upper bound;
- "ones": minus the predicted remaining GPU-time, sum_j n_jc * R_j / rate_jc, with R_j the
  steps left (JobSpec.remaining_steps, initial-batch steps) and rate_jc = goodput_jc /
  init_bsz_j (ONES's y_j n_j (1/rho_j - 1) / X_j(n_j)), plus n_jc x S_j GPU-seconds
  when option c moves a running job (the restart's idle GPUs: ONES's reorder limits
  moves, this prices them in the fitness's own unit); an unallocated job costs its
  remaining GPU-time T_j on its smallest configuration plus a shortest-first waiting
  charge G^2 / T_j, G the round's median T_j (ours: ONES pads every free GPU, so it
  never states this case; the charge makes leaving a short job waiting the dearer).
What we changed from ONES: configurations come from the MILP's shape space (one node with a
chain size of GPUs, or whole nodes), so the two can be compared on equal terms, and the
search seeds from the running schedule every round.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from schedlab.formulations.options import (
    OptionSet,
    enumerate_options,
    option_goodput,
    pinned_stays,
    restart_cost_s,
    utility,
)
from schedlab.formulations.packing import NodeState
from schedlab.state import GpuRef, JobSpec, RoundInput

__all__ = ["BATCH_RULES", "FITNESS", "Evolution", "EvolutionConfig", "RoundValues", "round_values"]

FITNESS = ("milp", "ones")
BATCH_RULES = ("linear", "best")


@dataclass(frozen=True)
class EvolutionConfig:
    """The search's settings (module docstring); ValueError for an unknown fitness or batch rule.

    Attributes
    ----------
    population : int
        Schedules kept from generation to generation and from round to round.
    crossover_rate, mutation_rate : float
        Probability that a pair of parents crosses over, that a child loses one job.
    young_s : float
        Jobs younger than this (seconds) are not preempted; the growth cap doubles every young_s.
    fitness : {"ones", "milp"}
        Predicted remaining GPU-time (ONES), or the goodput MILP's objective.
    batch_rule : {"linear", "best"}
        ONES's linear scaling of the user's per-GPU batch, or the goodput model's best batch.
    cap_growth : bool
        ONES's doubling GPU cap; False allows max_gpus (the MILP's space).
    generations : int
        Generations per round, unless `time_budget_ms` (milliseconds) runs out first.
    """

    population: int = 16
    crossover_rate: float = 0.5
    mutation_rate: float = 0.3
    young_s: float = 600.0  # exempt from preemption (ONES: two epochs; here an age)
    fitness: str = "ones"
    batch_rule: str = "linear"
    cap_growth: bool = True  # ONES's doubling GPU cap; False: max_gpus (the MILP's space)
    generations: int = 10  # budget per round, whichever of the two comes first
    time_budget_ms: float | None = None

    def __post_init__(self):
        if self.fitness not in FITNESS or self.batch_rule not in BATCH_RULES:
            raise ValueError(f"fitness in {FITNESS}, batch_rule in {BATCH_RULES}")


@dataclass
class RoundValues:
    """Per option: value under the batch rule, its batch split, and per-job lookups."""

    opts: OptionSet
    value: np.ndarray  # fitness contribution of each option
    unallocated: np.ndarray  # fitness contribution of each job left out
    objective: np.ndarray  # the MILP objective contribution of each option (for reports)
    total_bsz: np.ndarray
    local_bsz: np.ndarray
    accum_steps: np.ndarray
    by_job: list[np.ndarray]  # option indices per job, largest first


def base_local_bsz(job: JobSpec) -> float:
    """ONES's per-GPU base batch: the user's batch over the user's GPUs (else the initial batch)."""
    if job.requested_bsz and job.requested_gpus:
        return job.requested_bsz / job.requested_gpus
    return float(job.batch.init_bsz)


@dataclass(frozen=True)
class _Limits:
    """Per job: ONES's growth cap (the request doubled every `young_s` of age, within
    max_gpus), and the padding order (oldest first)."""

    caps: np.ndarray
    oldest_first: np.ndarray
    sizes: tuple[np.ndarray, ...]  # per job, its configurations' GPU counts within the cap, ascending

    @classmethod
    def of(cls, ri: RoundInput, cfg: EvolutionConfig, vals: "RoundValues") -> "_Limits":
        requests = np.array([min(job.gang_gpus, job.max_gpus) for job in ri.jobs], dtype=int)
        doublings = np.array([int(job.age_s // cfg.young_s) for job in ri.jobs])
        caps = np.array([job.max_gpus for job in ri.jobs])
        if cfg.cap_growth:
            caps = np.minimum(caps, requests * 2.0 ** np.minimum(doublings, 30)).astype(int)
        sizes = tuple(np.unique(n[n <= cap]) for n, cap in zip((vals.opts.num_gpus[c] for c in vals.by_job), caps))
        return cls(caps, np.argsort([-job.age_s for job in ri.jobs], kind="stable"), sizes)

    def growth(self, j: int, count: int) -> int:
        """Slots job j needs to reach its next larger configuration (0: none)."""
        larger = self.sizes[j][self.sizes[j] > count]
        return int(larger[0]) - count if len(larger) else 0


def round_values(ri: RoundInput, cfg: EvolutionConfig) -> RoundValues:
    """Every configuration of the round (formulations.options) valued under cfg's batch rule and fitness.

    Options are valued within each job's batch limits on their GPU type (JobSpec.batch_on).
    InputError (options.pinned_stays) for a pinned job that cannot stay.
    """
    opts = enumerate_options(ri)
    pinned_stays(opts)
    jobs = ri.jobs
    init = np.array([jobs[j].batch.init_bsz for j in opts.job], dtype=float)
    if cfg.batch_rule == "linear":
        per_gpu = np.array([base_local_bsz(jobs[j]) for j in opts.job], dtype=float)
        max_bsz = np.array([jobs[j].batch.max_bsz for j in opts.job], dtype=float)
        fixed = np.array([jobs[j].fixed_bsz or 0 for j in opts.job], dtype=float)
        total = np.where(fixed > 0, fixed, np.clip(per_gpu * opts.num_gpus, init, max_bsz))
        good, local, accum = option_goodput(opts, total)
    else:
        good, local, accum = opts.goodput, opts.local_bsz, opts.accum_steps
    # Same normalization and restart factor as the MILP: scale its speedups by the goodput ratio.
    ratio = np.divide(good, opts.goodput, out=np.zeros_like(good), where=opts.goodput > 0)
    penalized = opts.penalized_speedup * ratio
    objective = np.where(penalized > 0, utility(np.maximum(penalized, 1e-12), ri.settings.p), -np.inf)
    if cfg.fitness == "milp":
        value, unallocated = objective, opts.U0.copy()
    else:
        remaining = np.array([jobs[j].remaining_steps or 1.0 for j in opts.job])
        rate = np.maximum(good / init, 1e-12)
        moves = ~opts.stay & np.array([jobs[j].running for j in opts.job], dtype=bool)
        restart_s = np.array([restart_cost_s(jobs[j], ri.settings) for j in opts.job])
        gpu_time_s = opts.num_gpus * remaining / rate
        value = -(gpu_time_s + opts.num_gpus * moves * restart_s)
        unallocated = -waiting_cost(opts, gpu_time_s, len(jobs))
    by_job = [np.flatnonzero((opts.job == j) & (good > 0)) for j in range(len(jobs))]
    by_job = [c[np.lexsort((-value[c], -opts.num_gpus[c]))] for c in by_job]
    totals = (opts.num_gpus * local * (accum + 1)).astype(int)
    return RoundValues(opts, value, unallocated, objective, totals, local, accum, by_job)


def waiting_cost(opts: OptionSet, gpu_time_s: np.ndarray, num_jobs: int) -> np.ndarray:
    """An unallocated job's fitness cost: its remaining GPU-time T_j on its smallest
    configuration plus a shortest-first waiting charge G^2 / T_j (G: the round's median T_j)."""
    smallest = np.zeros(num_jobs)
    for j in range(num_jobs):
        mine = np.flatnonzero(opts.job == j)
        if len(mine):
            smallest[j] = gpu_time_s[mine[np.argmin(opts.num_gpus[mine])]]
    smallest = np.maximum(smallest, 1e-9)
    return smallest + np.median(smallest) ** 2 / smallest


class Evolution:
    """The online search: keeps its population between rounds."""

    def __init__(self, cfg: EvolutionConfig, rng: np.random.Generator):
        self.cfg = cfg
        self.rng = rng
        self._population: list[dict[str, tuple[GpuRef, ...]]] = []

    def search(self, ri: RoundInput) -> tuple[np.ndarray, dict[str, tuple[GpuRef, ...]], RoundValues, int]:
        """Best schedule found within the budget: chosen option per job (-1: none), its GPUs,
        the round's values and the generations run."""
        t0 = time.perf_counter()
        vals = round_values(ri, self.cfg)
        limits = _Limits.of(ri, self.cfg, vals)
        slots = _Slots(ri)
        seeds = [slots.encode({j.id: j.current_gpus for j in ri.jobs})] + [slots.encode(p) for p in self._population]
        pop = [self._settle(g, vals, limits, slots, ri) for g in seeds]
        randoms = self.rng.integers(-1, len(ri.jobs), size=(max(self.cfg.population - len(seeds), 0), len(slots.refs)))
        pop = self._select(pop + [self._settle(g, vals, limits, slots, ri, self.rng) for g in randoms])
        gens = 0
        while gens < self.cfg.generations and not self._out_of_time(t0):
            children = self._offspring([g for g, _, _ in pop], ri)
            pop = self._select(pop + [self._settle(c, vals, limits, slots, ri, self.rng) for c in children])
            gens += 1
        self._population = [slots.decode(g) for g, _, _ in pop]
        return pop[0][1], slots.decode(pop[0][0]), vals, gens

    def _out_of_time(self, t0: float) -> bool:
        budget = self.cfg.time_budget_ms
        return budget is not None and (time.perf_counter() - t0) * 1e3 >= budget

    def _select(self, pop):
        pop = sorted(pop, key=lambda t: -t[2])
        return pop[: self.cfg.population]

    def _settle(self, genome: np.ndarray, vals: RoundValues, limits: _Limits, slots: "_Slots", ri: RoundInput,
                rng: np.random.Generator | None = None):
        """Pad, reorder, and pad and reorder once more: slots the reorder freed (a count that
        no shape fits) go back to work, so no schedule gains fitness by idling GPUs."""
        for _ in range(2):
            self._pad(genome, limits, rng)
            genome, chosen, value = self._repair(genome, vals, limits.caps, slots, ri)
        return genome, chosen, value

    def _offspring(self, parents: list[np.ndarray], ri: RoundInput) -> list[np.ndarray]:
        rng, cfg = self.rng, self.cfg
        children = []
        order = rng.permutation(len(parents) * 2) % len(parents)
        for a, b in zip(order[::2], order[1::2]):
            x, y = parents[a].copy(), parents[b].copy()
            if rng.random() < cfg.crossover_rate:
                swap = rng.random(len(x)) < 0.5
                x[swap], y[swap] = parents[b][swap], parents[a][swap]
            children += [x, y]
        old = np.array([job.age_s >= cfg.young_s for job in ri.jobs])
        for child in children:
            if rng.random() < cfg.mutation_rate:
                held = np.unique(child[child >= 0])
                held = held[old[held]]
                if len(held):
                    child[child == rng.choice(held)] = -1
        return children

    @staticmethod
    def _pad(genome: np.ndarray, limits: "_Limits", rng: np.random.Generator | None) -> None:
        """Free slots to waiting jobs (oldest first, one each), then to running ones, each up
        to its next configuration size within its cap: the smallest first, or (offspring,
        given rng) one at random, so that children differ in which jobs grow."""
        counts = np.bincount(genome[genome >= 0], minlength=len(limits.caps))
        free = list(np.flatnonzero(genome < 0))
        for j in limits.oldest_first:
            if counts[j] == 0 and free:
                genome[free.pop(0)] = j
                counts[j] = 1
        while free:
            need = np.array([limits.growth(j, counts[j]) if counts[j] else 0 for j in range(len(counts))])
            room = np.flatnonzero((need > 0) & (need <= len(free)))
            if not len(room):
                return
            j = room[np.argmin(counts[room])] if rng is None else rng.choice(room)
            genome[free[: need[j]]] = j
            free = free[need[j]:]
            counts[j] += need[j]

    def _repair(self, genome: np.ndarray, vals: RoundValues, caps: np.ndarray, slots: "_Slots", ri: RoundInput):
        """Reorder: genome -> (feasible genome, chosen option per job, fitness)."""
        opts = vals.opts
        counts = np.bincount(genome[genome >= 0], minlength=len(ri.jobs))
        chosen = np.full(len(ri.jobs), -1)
        state = NodeState(ri.cluster)
        placed: dict[int, tuple[GpuRef, ...]] = {}
        for j, job in enumerate(ri.jobs):  # stayers: pinned, or the size it holds now -> the same GPUs
            if job.running and j in opts.stay_nodes and (job.pinned or _largest_size(vals, j, min(counts[j], caps[j]))
                                                         == len(job.current_gpus)) and state.take_exact(job.current_gpus):
                chosen[j] = opts.stay_option(j)
                placed[j] = job.current_gpus
        for j in np.argsort(-counts, kind="stable"):
            if counts[j] == 0 or chosen[j] >= 0:
                continue
            home = slots.home_nodes(genome, j)
            for c in vals.by_job[j]:
                if opts.stay[c] or opts.num_gpus[c] > min(counts[j], caps[j]):
                    continue
                grp = opts.groups[opts.group[c]]
                per_node = int(opts.num_gpus[c] // opts.num_nodes[c])
                nodes = sorted(grp.nodes, key=lambda k: -home.get(k, 0))
                refs = state.take_shape(tuple(nodes), int(opts.num_nodes[c]), per_node)
                if refs is not None:
                    chosen[j], placed[j] = c, refs
                    break
        value = sum(vals.value[chosen[j]] if chosen[j] >= 0 else vals.unallocated[j] for j in range(len(ri.jobs)))
        return slots.encode({ri.jobs[j].id: g for j, g in placed.items()}), chosen, float(value)


def _largest_size(vals: RoundValues, j: int, most_gpus: int) -> int:
    sizes = vals.opts.num_gpus[vals.by_job[j]]
    sizes = sizes[sizes <= most_gpus]
    return int(sizes.max()) if len(sizes) else 0


class _Slots:
    """GPU slot <-> (node, GPU) and job id <-> index for one round."""

    def __init__(self, ri: RoundInput):
        self.refs = [GpuRef(n.id, k) for n in ri.cluster.nodes for k in range(n.gpus)]
        self.index = {g: i for i, g in enumerate(self.refs)}
        self.node_of = np.array([k for k, n in enumerate(ri.cluster.nodes) for _ in range(n.gpus)])
        self.ids = [j.id for j in ri.jobs]
        self.job_index = {jid: j for j, jid in enumerate(self.ids)}

    def encode(self, placement: dict[str, tuple[GpuRef, ...]]) -> np.ndarray:
        genome = np.full(len(self.refs), -1)
        for jid, gpus in placement.items():
            if jid in self.job_index:
                for g in gpus:
                    if g in self.index:
                        genome[self.index[g]] = self.job_index[jid]
        return genome

    def decode(self, genome: np.ndarray) -> dict[str, tuple[GpuRef, ...]]:
        out: dict[str, list[GpuRef]] = {}
        for i in np.flatnonzero(genome >= 0):
            out.setdefault(self.ids[genome[i]], []).append(self.refs[i])
        return {k: tuple(v) for k, v in out.items()}

    def home_nodes(self, genome: np.ndarray, j: int) -> dict[int, int]:
        nodes, counts = np.unique(self.node_of[genome == j], return_counts=True)
        return dict(zip(nodes.tolist(), counts.tolist()))
