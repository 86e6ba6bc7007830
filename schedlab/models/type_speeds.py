"""Per-GPU-type speed of the Pollux applications: the data every type but the T4 is derived from.

The Pollux artifact measured its applications on one type (the T4, profiles.POLLUX_GPU_TYPE).
Another type's behaviour is derived from the T4's by a per-application speed ratio rho (data
shipped in data/type_speeds/speeds.csv: the P100's, V100's and K80's derived from Gavel's table,
the H100's from our H100 calibration tables; its SOURCE.md says how):
a micro-step's compute takes 1 / rho of its T4 time, the gradient sync as long as on the T4 (the
links are the cluster's, not the GPU's). In Pollux's model that is the compute terms scaled:

    alpha_c' = alpha_c / rho,  beta_c' = beta_c / rho,  the sync terms and gamma as fitted

(`project_params`). The replay's worlds apply the same ratio to the measured tables' compute
(sim.world); `bench --cluster` gives random jobs projected parameters on every type.
"""

from __future__ import annotations

import csv
from dataclasses import replace
from functools import cache, lru_cache

from schedlab.errors import ConfigError
from schedlab.models.profiles import POLLUX_GPU_TYPE, data_dir
from schedlab.state import ThroughputParams

__all__ = ["derived_types", "project_params", "speed_ratio", "type_speeds"]


@cache
def type_speeds() -> dict[str, dict[str, float]]:
    """application -> GPU type -> its speed relative to the T4 (data/type_speeds/speeds.csv)."""
    with open(data_dir() / "type_speeds" / "speeds.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return {row["application"]: {t: float(v) for t, v in row.items() if t not in ("application", "gavel_job_type")}
            for row in rows}


def derived_types() -> tuple[str, ...]:
    """The GPU types every application has a speed ratio for (the T4 among them), in the data's order."""
    speeds = type_speeds()
    first = next(iter(speeds.values()))
    return tuple(t for t in first if all(t in by_type for by_type in speeds.values()))


def speed_ratio(application: str, gpu_type: str) -> float:
    """rho: how many times a T4's speed `application` computes at on one GPU of `gpu_type`.

    Examples
    --------
    >>> speed_ratio("imagenet", "t4"), speed_ratio("imagenet", "v100")
    (1.0, 1.517)
    """
    speeds = type_speeds()
    if application not in speeds or gpu_type not in speeds[application]:
        known = ", ".join(derived_types())
        raise ConfigError(f"no speed ratio of {application!r} on GPU type {gpu_type!r}: the types derived from the "
                          f"{POLLUX_GPU_TYPE} tables are {known} (data/type_speeds/speeds.csv)")
    return speeds[application][gpu_type]


@lru_cache(maxsize=1 << 14)
def project_params(params: ThroughputParams, ratio: float) -> ThroughputParams:
    """Pollux's parameters on a type `ratio` times as fast at compute (module docstring).

    The same inputs give the very same object: a round's checks recognize parameters they have
    seen by identity, and the jobs of one application share them.

    Examples
    --------
    >>> p = project_params(ThroughputParams(0.2, 0.01, 0.1, 0.01, 0.05, 0.001, 1.5), 2.0)
    >>> p.alpha_c, p.beta_c, p.alpha_n
    (0.1, 0.005, 0.1)
    """
    return replace(params, alpha_c=params.alpha_c / ratio, beta_c=params.beta_c / ratio)
