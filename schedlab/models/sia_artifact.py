"""A reader of Sia's artifact layout (Jayaram Subramanya et al., SOSP'23) from a folder the user holds.

Sia's artifact measured each application on several GPU types, in Pollux's table format split
by type::

    <root>/traces/<app>/placements-<type>.csv   placement, local_bsz, step_time, sync_time
    <root>/traces/<app>/scalability-<type>.csv  num_nodes, num_replicas, local_bsz, step_time, sync_time
    <root>/traces/<app>/validation-<bsz>.csv    progress, iteration, metric, grad_sqr, grad_var
    <root>/workloads/*.csv                      Pollux's workload format (traces.load_workload reads them)

Each (application, type) is read as Pollux's tables are (models.throughput.MeasuredTable) and
fitted as the shipped profiles are (fit_throughput_params over every measured point), so an
application gets per-type ThroughputParams: what JobSpec.throughput takes (and, with its
completion epoch, per-type ApplicationProfiles: `SiaApplication.profiles`). The validation
tables are the type-free part, as in Pollux's artifact: the gradient statistics of the first
epoch at the smallest (initial) batch and the validated batch range; the local batch range is
each type's measured one (a T4 fits less than an A100).

The artifact carries no license, so schedlab ships none of it and its tests read a tiny folder
written in this layout. Errors name the missing file or folder.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from schedlab.errors import ConfigError
from schedlab.models.profiles import ApplicationProfile
from schedlab.models.throughput import MeasuredTable, fit_throughput_params, rmsle, step_time_s
from schedlab.state import BatchLimits, GradStats, ThroughputParams

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["SiaApplication", "application_names", "gpu_types", "read_application", "read_artifact", "type_table",
           "workload_paths"]


@dataclass(frozen=True)
class SiaApplication:
    """One application of Sia's artifact: its fit per GPU type and what its validation tables give.

    Attributes
    ----------
    name
        The application (its folder under traces/).
    throughput
        GPU type -> Pollux's 7 parameters fitted to that type's tables (JobSpec.throughput).
    fit_rmsle
        GPU type -> the fit's step-time RMSLE over that type's measured points.
    grad_stats
        Gradient statistics of the first epoch at the initial (smallest validated) batch.
    batch
        GPU type -> batch limits: the validated total batches' range, that type's measured
        local batches' range.
    """

    name: str
    throughput: dict[str, ThroughputParams]
    fit_rmsle: dict[str, float]
    grad_stats: GradStats
    batch: dict[str, BatchLimits]

    def profiles(self, max_epochs: int) -> dict[str, ApplicationProfile]:
        """GPU type -> the application's profile on it, as the shipped Pollux profiles are (models.profiles).

        `max_epochs` is its completion epoch, which the tables do not give (Pollux's MAX_EPOCHS
        for its six applications).
        """
        return {t: ApplicationProfile(self.name, t, params, self.grad_stats, self.batch[t], max_epochs,
                                      self.fit_rmsle[t]) for t, params in self.throughput.items()}


def _traces(root: str | Path) -> Path:
    folder = Path(root) / "traces"
    if not folder.is_dir():
        raise ConfigError(f"Sia artifact {str(root)!r}: no folder {str(folder)!r}; give the artifact's root "
                          "(the folder holding traces/ and workloads/)")
    return folder


def application_names(root: str | Path) -> tuple[str, ...]:
    """The applications of the artifact at `root`: the folders under traces/, sorted."""
    return tuple(sorted(p.name for p in _traces(root).iterdir() if p.is_dir()))


def gpu_types(root: str | Path, app: str) -> tuple[str, ...]:
    """The GPU types an application was measured on: the <type> of its placements-<type>.csv, sorted.

    Raises ConfigError naming the folder when it has none.
    """
    folder = _traces(root) / app
    found = tuple(sorted(p.stem.removeprefix("placements-") for p in folder.glob("placements-*.csv")))
    if not found:
        raise ConfigError(f"Sia artifact: no placements-<type>.csv in {str(folder)!r}")
    return found


def _read(path: Path) -> pd.DataFrame:
    import pandas as pd  # here: importing schedlab.models reads no table

    if not path.is_file():
        raise ConfigError(f"Sia artifact: missing {str(path)!r}")
    return pd.read_csv(path)


def type_table(root: str | Path, app: str, gpu_type: str) -> MeasuredTable:
    """An application's measured step and sync times on one GPU type (its placements and scalability tables)."""
    folder = _traces(root) / app
    return MeasuredTable(_read(folder / f"placements-{gpu_type}.csv"), _read(folder / f"scalability-{gpu_type}.csv"))


def _fit(table: MeasuredTable) -> tuple[ThroughputParams, float]:
    """Pollux's parameters fitted to every measured point, and the fit's step-time RMSLE."""
    pts = table.points()
    params = fit_throughput_params(pts.num_nodes, pts.num_replicas, pts.local_bsz, pts.step_time, pts.sync_time)
    pred = step_time_s(params, pts.num_nodes.to_numpy(), pts.num_replicas.to_numpy(), pts.local_bsz.to_numpy())
    return params, rmsle(pred, pts.step_time.to_numpy())


def read_application(root: str | Path, app: str) -> SiaApplication:
    """One application of the artifact at `root`, fitted per GPU type (module docstring).

    Raises
    ------
    ConfigError
        Naming the missing folder or file: traces/, the application's placements-<type>.csv
        (none), a type's scalability-<type>.csv, or its validation-<bsz>.csv (none).
    """
    folder, types = _traces(root) / app, gpu_types(root, app)
    validation = {int(p.stem.removeprefix("validation-")): p for p in folder.glob("validation-*.csv")}
    if not validation:
        raise ConfigError(f"Sia artifact: no validation-<bsz>.csv in {str(folder)!r}")
    init_bsz, max_bsz = min(validation), max(validation)
    first_epoch = _read(validation[init_bsz]).iloc[0]
    throughput, errors, batch = {}, {}, {}
    for gpu_type in types:
        table = type_table(root, app, gpu_type)
        throughput[gpu_type], errors[gpu_type] = _fit(table)
        local = table.placements.local_bsz
        batch[gpu_type] = BatchLimits(init_bsz, max_bsz, int(local.min()), int(local.max()))
    return SiaApplication(app, throughput, errors, GradStats(float(first_epoch.grad_sqr), float(first_epoch.grad_var)),
                          batch)


def read_artifact(root: str | Path) -> dict[str, SiaApplication]:
    """Every application of the artifact at `root`: name -> its per-type fit (read_application)."""
    return {app: read_application(root, app) for app in application_names(root)}


def workload_paths(root: str | Path) -> dict[str, Path]:
    """The artifact's workloads, file stem -> path, sorted by name (Pollux's format: traces.load_workload).

    Raises ConfigError naming the folder when it is missing or holds no CSV.
    """
    folder = Path(root) / "workloads"
    found = {p.stem: p for p in sorted(folder.glob("*.csv"))} if folder.is_dir() else {}
    if not found:
        raise ConfigError(f"Sia artifact: no workload CSV in {str(folder)!r}")
    return found
