"""Output folders and their kinds: a folder that one command writes is marked by the files it
holds, and no command writes into another's folder.

`schedlab sweep` writes a sweep's folder (marked by its sweep.toml; `schedlab report` adds its
tables and figures there), `schedlab replay --out` a replay's (jobs.csv, rounds.csv,
summary.json). A command takes a folder that is new, empty or of its own kind, and refuses a
file, a folder of another kind, or a folder holding other files and none of its markers: what
it writes never lands on what another run left. `schedlab record --out` writes one file, and
never over a file that marks a folder.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from schedlab.errors import ConfigError

__all__ = ["OUTPUT_KINDS", "OutputKind", "check_out_file", "claim_folder", "folder_kind"]


@dataclass(frozen=True)
class OutputKind:
    """A kind of output folder: what it is called, the files that mark it, and what it holds.

    Attributes
    ----------
    name
        e.g. "sweep", as messages name it.
    markers
        The files that mark a folder of this kind: a folder holding any of them is one.
    holds
        What a command writes there, as messages describe it.
    """

    name: str
    markers: tuple[str, ...]
    holds: str


OUTPUT_KINDS = {
    "sweep": OutputKind("sweep", ("sweep.toml",), "sweep.toml and its cells"),
    "replay": OutputKind("replay", ("summary.json", "jobs.csv", "rounds.csv"), "jobs.csv, rounds.csv and summary.json"),
}


def folder_kind(folder: str | Path) -> OutputKind | None:
    """The kind of output folder `folder` is (the first in OUTPUT_KINDS whose marker it holds),
    or None."""
    folder = Path(folder)
    return next((kind for kind in OUTPUT_KINDS.values() if any((folder / m).is_file() for m in kind.markers)), None)


def _marker(folder: Path, kind: OutputKind) -> str:
    """The first of `kind`'s markers that `folder` holds."""
    return next(m for m in kind.markers if (folder / m).is_file())


def claim_folder(out_dir: str | Path, kind: OutputKind, flag: str = "--out") -> Path:
    """The output folder for a run of `kind`, created now if needed, so that a bad folder fails
    before the run, not after.

    Raises ConfigError where `out_dir` is a file, cannot be created or written, is a folder of
    another kind, or holds other files and none of `kind`'s markers; a folder of `kind` itself is
    taken (a replay's is written again; a sweep's resumes, sweep.run checks its config).
    """
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{flag} {out}: is a file; give a folder for {kind.holds}")
    if out.is_dir() and any(out.iterdir()):
        found = folder_kind(out)
        if found is not None and found != kind:
            raise ConfigError(f"{flag} {out}: is a {found.name}'s output folder (it holds {_marker(out, found)}); "
                              f"a {kind.name} does not write into it: give the {kind.name} a new or empty folder")
        if found is None:
            raise ConfigError(f"{flag} {out}: holds other files and is no {kind.name}'s output folder (no "
                              f"{' or '.join(kind.markers)}); give a new or empty folder for {kind.holds}")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"{flag} {out}: cannot create it ({exc.strerror}); give a folder you can write") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise ConfigError(f"{flag} {out}: not writable; give a folder you can write")
    return out


def check_out_file(path: str | Path, flag: str = "--out") -> Path:
    """`path` as a file to write: refused where it is a folder, or a file that marks an output
    folder (a sweep's sweep.toml, a replay's summary.json)."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{flag} {path}: is a folder; give the file to write, e.g. {path / 'rounds.jsonl'}")
    found = folder_kind(path.parent)
    if found is not None and path.name in found.markers:
        raise ConfigError(f"{flag} {path}: is the {path.name} of a {found.name}'s output folder; "
                          f"give a file of its own, e.g. {path.with_name('rounds.jsonl')}")
    return path
