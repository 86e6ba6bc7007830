"""An independent check of any allocation against the round's rules.

Deliberately shares no code with the formulations: it reads only the input and the answer.
"""

from __future__ import annotations

import operator

from schedlab.errors import VerificationError
from schedlab.state import Cluster, JobAllocation, JobSpec, RoundInput

__all__ = ["problems", "verify"]


def problems(round_input: RoundInput, allocations: tuple[JobAllocation, ...], budgets: bool = True) -> list[str]:
    """Every rule the allocations break, one message each (empty: valid).

    The rules: one allocation per job of the round and none for other jobs; GPUs that exist,
    each held by one job; a pinned job on exactly its current GPUs; GPU counts within
    [min_gpus, max_gpus], all of one GPU type (a job never mixes types), one the job has a
    model for; total batch = GPUs x local batch x (accumulation steps + 1), the local batch
    within its limits on that type (JobSpec.batch_on) and the total at most
    max(max_bsz, fixed_bsz); freeze levels only for
    jobs that opt in, within [min_frozen, top_level], and their penalty within the budget left.
    `budgets=False` leaves the budgets out (a replay lets a budget-blind policy overspend, and
    counts it).
    """
    cluster = round_input.cluster
    index = cluster.node_index
    jobs = {j.id: j for j in round_input.jobs}
    found: list[str] = []
    seen_jobs: set[str] = set()
    holder: dict[tuple[str, int], str] = {}
    # The common case at once: every GPU exists and is held once (then the GPU by GPU checks below
    # would find nothing); on one GPU type, every allocation's type is that one.
    gpus_fine = cluster.holds_once(a.gpus for a in allocations)
    one_type = [next(iter(cluster.gpu_types))] if gpus_fine and len(cluster.gpu_types) == 1 else None
    for a in allocations:
        if a.job_id not in jobs:
            found.append(f"allocation for unknown job {a.job_id!r}")
            continue
        if a.job_id in seen_jobs:
            found.append(f"job {a.job_id!r} has more than one allocation")
        seen_jobs.add(a.job_id)
        job = jobs[a.job_id]
        for g in () if gpus_fine else a.gpus:
            if g.node not in index or not 0 <= g.gpu < cluster.nodes[index[g.node]].gpus:
                found.append(f"job {a.job_id!r} holds GPU {g.node}:{g.gpu}, which does not exist")
                continue
            if (g.node, g.gpu) in holder:
                found.append(f"GPU {g.node}:{g.gpu} given to {holder[g.node, g.gpu]!r} and {a.job_id!r}")
            holder[g.node, g.gpu] = a.job_id
        f = job.freezing
        if f is None and a.frozen_groups:
            found.append(f"job {a.job_id!r} freezes {a.frozen_groups} layer groups but did not opt in to freezing")
        if f is not None and a.gpus and not f.min_frozen <= a.frozen_groups <= f.top_level:
            found.append(f"job {a.job_id!r} freezes {a.frozen_groups} groups outside its [{f.min_frozen}, {f.top_level}]")
        if budgets and f is not None and a.freeze_penalty > f.budget_left + 1e-9:
            found.append(f"job {a.job_id!r} spends penalty {a.freeze_penalty:.3g} above its budget {f.budget_left:.3g}")
        if job.pinned and set(a.gpus) != set(job.current_gpus):
            found.append(f"job {a.job_id!r} is pinned to its current GPUs, but was given "
                         f"{[g.key for g in a.gpus] or 'none'}")
        if not a.gpus:
            continue
        if not job.min_gpus <= len(a.gpus) <= job.max_gpus:
            found.append(f"job {a.job_id!r} got {len(a.gpus)} GPUs outside its [{job.min_gpus}, {job.max_gpus}]")
        types = one_type or sorted({cluster.nodes[index[g.node]].gpu_type for g in a.gpus if g.node in index})
        if len(types) > 1:
            found.append(f"job {a.job_id!r} mixes GPU types {types} in one allocation; a job's GPUs are of one type")
        elif types and types[0] not in job.throughput:
            found.append(f"job {a.job_id!r} runs on GPU type {types[0]!r}, for which it has no throughput model")
        if a.total_bsz != len(a.gpus) * a.local_bsz * (a.accum_steps + 1):
            found.append(f"job {a.job_id!r}: total batch {a.total_bsz} != GPUs x local x (accum + 1)")
        b = job.batch_on(types[0]) if len(types) == 1 else job.batch
        if not b.min_local_bsz <= a.local_bsz <= b.max_local_bsz:
            on = f" on {types[0]}" if len(types) == 1 and types[0] in job.batch_by_type else ""
            found.append(f"job {a.job_id!r}: local batch {a.local_bsz} outside [{b.min_local_bsz}, {b.max_local_bsz}]{on}")
        if a.total_bsz > max(b.max_bsz, job.fixed_bsz or 0):
            found.append(f"job {a.job_id!r}: total batch {a.total_bsz} above its maximum {b.max_bsz}")
    missing = set(jobs) - seen_jobs
    if missing:
        found.append(f"jobs without an allocation entry: {sorted(missing)}")
    return found


def verify(round_input: RoundInput, allocations: tuple[JobAllocation, ...], budgets: bool = True) -> None:
    """Raise VerificationError listing every rule the allocation breaks.

    The last answer that passed is remembered with what the rules read of its round (the
    cluster and jobs: frozen objects, held, so their ids are not reused): a replay verifies
    solve_round's answer again, on a round of the same cluster and jobs, and that check is then
    free."""
    global _last_passed
    last = _last_passed
    if (last is not None and last[2] is allocations and last[0] is round_input.cluster and (last[3] or not budgets)
            and len(last[1]) == len(round_input.jobs) and all(map(operator.is_, last[1], round_input.jobs))):
        return
    found = problems(round_input, allocations, budgets)
    if found:
        raise VerificationError(found)
    _last_passed = (round_input.cluster, round_input.jobs, allocations, budgets)


# verify's last pass: the round's cluster and jobs, the answer, whether budgets were checked
_last_passed: tuple[Cluster, tuple[JobSpec, ...], tuple[JobAllocation, ...], bool] | None = None
