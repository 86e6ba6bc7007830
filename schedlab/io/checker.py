"""The checker a round's fields pass through: it reads each value, holds numbers to their schema
range, and collects every problem under its field's path (`jobs[3].batch.max_local_bsz`), so
that one InputError names them all.

A round comes in one of two forms, and the same rules read both: its JSON (Checker), or its
dataclasses (DataChecker), each object read through its fields as the JSON object of its kind
(Fields) rather than turned into JSON first.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import reprlib
from collections.abc import Callable, Mapping
from operator import attrgetter
from typing import Any, NamedTuple, TypeGuard, TypeVar

from schedlab.io.schema import FIELD_ACCEPT, FIELD_RULES, MAX_ID_CHARS, SCHEMA_KEYS, Accept
from schedlab.state import (
    BatchLimits,
    Cluster,
    FreezePenalty,
    FreezeSpec,
    GpuRef,
    GradStats,
    JobSpec,
    LayerGroup,
    Node,
    Rack,
    RoundInput,
    Settings,
    ThroughputParams,
    Topology,
)

__all__ = ["CLASSES", "Checker", "DataChecker", "Fields", "is_id", "kept_numbers", "number_problem", "show", "valid_ids"]

_T = TypeVar("_T")
_PLAIN = frozenset((int, float, str))  # not bool: True == 1 would take a valid 1's place

_shown = reprlib.Repr()
_shown.maxstring, _shown.maxother, _shown.maxlevel = 60, 60, 3


def is_id(value: Any) -> TypeGuard[str]:
    """Whether `value` is a usable id: a non-empty string of at most MAX_ID_CHARS characters."""
    return isinstance(value, str) and 0 < len(value) <= MAX_ID_CHARS


def kept_numbers(column: tuple, accept: Accept, kind: type, optional: bool) -> bool:
    """Whether Checker.field keeps every number of `column` (None where `optional`) as it is: of
    its field's type, within its range."""
    values = [v for v in column if v is not None] if optional else column
    if not values:
        return True
    if set(map(type, values)) != {kind}:
        return False
    if kind is int:  # no NaN among ints: their extremes are their range
        least = min(values)
        return accept.int_lo <= least and max(values) <= accept.int_hi and (least > 0 or not accept.positive)
    # the sum is NaN where a value is (min() and max() would pass over it); inf is out of range
    least, total = min(values), sum(values)
    return total == total and accept.float_lo <= least and max(values) <= accept.float_hi and (least > 0 or not accept.positive)


def valid_ids(column: tuple, optional: bool) -> bool:
    """Whether every value of `column` is a usable id (is_id), or None where `optional`."""
    values = [v for v in column if v is not None] if optional else column
    return not values or (set(map(type, values)) == {str} and min(map(len, values)) > 0
                          and max(map(len, values)) <= MAX_ID_CHARS)


def show(value: Any) -> str:
    """A bad value as an error message quotes it: shortened (a 50 MB string is not echoed back)
    and depth-limited (a deeply nested value cannot recurse)."""
    return _shown.repr(value)


def number_problem(v: Any, minimum: float | None, positive: bool, integer: bool, maximum: float | None) -> str | None:
    """What is wrong with v as a number of these bounds, or None."""
    kind = type(v)
    if kind is bool or not isinstance(v, (int, float)):
        return f"must be {'an integer' if integer else 'a number'}, got {show(v)}"
    if kind is not int and not math.isfinite(v):
        return f"must be a finite number, got {v!r}"
    if (kind is int or integer) and abs(v) > 2**53:  # a float too: 1e300 is "whole"
        digits = f"{len(str(abs(v)))}" if abs(v) < 10**4000 else "over 4,000"  # str() stops at 4,300 digits
        return f"must be at most 2**53 in size, got {f'an integer of {digits} digits' if kind is int else show(v)}"
    if integer and v != int(v):
        return f"must be a whole number, got {show(v)}"
    if positive and v <= 0:
        return f"must be > 0, got {show(v)}"
    if minimum is not None and v < minimum:
        return f"must be >= {minimum}, got {show(v)}"
    if maximum is not None and v > maximum:
        return f"must be <= {maximum:g}, got {show(v)}"
    return None


class Checker:
    """Collects problems; each getter returns a usable default so parsing can go on."""

    def __init__(self) -> None:
        self.problems: list[str] = []
        self.layer_groups: dict[tuple, tuple[LayerGroup, ...]] = {}  # valid groups by their raw values
        self.parsed: dict[tuple, Any] = {}  # objects parsed without problems, by kind and raw values (`once`)

    def once(self, raw: Any, kind: str, parse: Callable[[], _T]) -> _T:
        """parse() of `raw`, an object of `kind`; or, where an object of that kind with the same
        plain values (numbers and strings, each of its type) parsed before without problems, what
        that returned: the jobs of one application share their throughput parameters and batch
        limits, and a round of 8,000 jobs checked them 8,000 times."""
        same = self.parsed.get((kind, id(raw)))  # the very object again: no key to build
        if same is not None and same[0] is raw:
            return same[1]
        key = self.values_key(raw, kind)
        if key is not None and key in self.parsed:
            return self.parsed[key]
        found = len(self.problems)
        value = parse()
        if key is not None and len(self.problems) == found:
            self.parsed[key] = value
            self.parsed[kind, id(raw)] = (raw, value)  # holds raw: its id is not reused meanwhile
        return value

    def values_key(self, raw: Any, kind: str) -> tuple | None:
        """The key of `once`: kind, and raw's keys and values where raw is a JSON object whose
        values are all plain, else None."""
        if type(raw) is not dict:
            return None
        items = tuple(raw.items())
        return (kind, items) if all(type(v) in _PLAIN for _, v in items) else None

    def bad(self, where: str, what: str) -> None:
        """Record that the field at `where` is bad, and `what` to do about it."""
        self.problems.append(f"{where}: {what}")

    def number(self, d: Mapping, key: str, where: str, default=None, minimum: float | None = None,
               positive: bool = False, integer: bool = False, required: bool = False, maximum: float | None = None,
               fix: str | None = None):
        """d[key] as a number within these bounds (an int where `integer`, else a float), or
        `default` where it is absent or bad; `fix`, where given, ends the problem's message."""
        v = d.get(key)
        if v is None:
            if required:
                self.bad(f"{where}.{key}", "is required" + (f"; {fix}" if fix else ""))
            return default
        problem = number_problem(v, minimum, positive, integer, maximum)
        if problem is None:
            return int(v) if integer else float(v)
        self.bad(key if where == "round" else f"{where}{key}" if key.startswith("[") else f"{where}.{key}",
                 f"{problem}; {fix}" if fix else problem)
        return default

    def field(self, d: Mapping, kind: str, key: str, where: str, default=None, required: bool = False,
              fix: str | None = None):
        """A number of an object of `kind`, checked against its schema's type and range; `fix`
        says how to mend a bad one."""
        v = d.get(key)
        accept = FIELD_ACCEPT[kind][key]
        if type(v) is float:
            if accept.float_lo <= v <= accept.float_hi and (v > 0 or not accept.positive):
                return v
        elif type(v) is int and accept.int_lo <= v <= accept.int_hi and (v > 0 or not accept.positive):
            return v if accept.integer else float(v)
        elif v is None and not required:
            return default
        return self.number(d, key, where, default, required=required, fix=fix, **FIELD_RULES[kind][key])

    def flag(self, d: Mapping, key: str, where: str, default: bool) -> bool:
        """d[key] as true or false, or `default` where it is absent or bad."""
        v = d.get(key, default)
        if not isinstance(v, bool):
            self.bad(f"{where}.{key}", f"must be true or false, got {show(v)}")
            return default
        return v

    def mapping(self, d: Any, where: str, kind: str | None = None) -> Mapping:
        """d if it is an object (else {}); with `kind`, its keys are checked against the schema's."""
        if not isinstance(d, Mapping):
            self.bad(where, f"must be an object, got {type(d).__name__}")
            return {}
        if kind is not None:
            self.known(d, kind, where)
        return d

    def known(self, d: Mapping, kind: str, where: str) -> None:
        """Name each key of d that the schema's object of `kind` does not have, with the closest it has."""
        allowed = SCHEMA_KEYS[kind]
        if allowed.issuperset(d):
            return
        for key in d:
            if key not in allowed:
                close = difflib.get_close_matches(str(key), allowed, n=1)
                hint = f"did you mean {close[0]!r}? " if close else ""
                name = key if isinstance(key, str) and len(key) <= 60 else show(key)
                self.bad(f"{where}.{name}" if where != "round" else name,
                         f"unknown key; {hint}use {', '.join(sorted(allowed))}")

    def sequence(self, d: Mapping, key: str, where: str) -> list | tuple:
        """d[key] if it is a list (absent: empty), else [] and a problem."""
        v = d.get(key, [])
        if not self.is_list(v):
            self.bad(f"{where}.{key}", f"must be a list, got {type(v).__name__}")
            return []
        return v

    def is_list(self, v: Any) -> TypeGuard[list | tuple]:
        """Whether v is a list in this form of a round (in JSON, a list)."""
        return isinstance(v, list)

    def plain(self, raw: Any, kind: str) -> Mapping | None:
        """raw's fields where raw is the plain form of an object of `kind` (in JSON, a dict), for
        the fast paths of common objects; None where it needs the full checks."""
        return raw if type(raw) is dict else None


# Each kind of object of a round (schema.SCHEMA_KEYS) as its dataclass.
CLASSES: dict[str, type] = {
    "round": RoundInput, "cluster": Cluster, "node": Node, "topology": Topology, "rack": Rack, "job": JobSpec,
    "grad_stats": GradStats, "batch": BatchLimits, "settings": Settings, "freezing": FreezeSpec,
    "group": LayerGroup, "penalty": FreezePenalty, "gpu": GpuRef, "params": ThroughputParams,
}
_RENAMED: dict[tuple[type, str], str] = {(JobSpec, "throughput"): "throughput_params"}  # (class, field) -> its JSON key


def _options_object(pairs: Any) -> Any:
    """Settings.solver_options, (name, value) pairs, as the JSON object they stand for; what is
    not pairs stays as it is, for the checker to refuse."""
    try:
        return dict(pairs) if pairs else {}
    except (TypeError, ValueError):
        return pairs


_READ_AS_JSON: dict[tuple[type, str], Callable[[Any], Any]] = {(Settings, "solver_options"): _options_object}


class _View(NamedTuple):
    """How a round's dataclass reads as its JSON object: its JSON keys, a getter of its field
    values in their order, the keys of its optional fields (None reads as absent, as the JSON
    form leaves the key out), and the keys whose value has another JSON form."""

    keys: tuple[str, ...]
    values: Callable[[Any], tuple]
    optional: tuple[str, ...]
    as_json: tuple[tuple[str, Callable[[Any], Any]], ...]


def _json_view(cls: type) -> _View:
    """The JSON view of a round's dataclass."""
    fields = dataclasses.fields(cls)
    keys = tuple(_RENAMED.get((cls, f.name), f.name) for f in fields)
    names = tuple(f.name for f in fields)
    return _View(keys, attrgetter(*names) if len(names) > 1 else lambda obj: (getattr(obj, names[0]),),
                 tuple(k for k, f in zip(keys, fields) if f.default is None),
                 tuple((k, _READ_AS_JSON[cls, f.name]) for k, f in zip(keys, fields) if (cls, f.name) in _READ_AS_JSON))


_VIEWS = {cls: _json_view(cls) for cls in CLASSES.values()}


class Fields(dict):
    """`obj`, an instance of a round's dataclass `cls`, read as the JSON object of its kind: each
    field under its JSON key (JobSpec.throughput as throughput_params), an optional field that
    is None absent, and `replaced` (JSON values) in place of the fields they name. Its values are
    read once, into a dict: the parser reads ~30 keys of each job, each then a dict look-up."""

    def __init__(self, obj: Any, cls: type, replaced: Mapping[str, Any] | None = None) -> None:
        view = _VIEWS[cls]
        super().__init__(zip(view.keys, view.values(obj)))
        for key in view.optional:
            if self[key] is None:
                del self[key]
        for key, as_json in view.as_json:
            if key in self:
                self[key] = as_json(self[key])
        if replaced:
            self.update(replaced)


# DataChecker.once's memory across rounds: (kind, id) -> (the frozen object, what it parsed to)
_PARSED: dict[tuple[str, int], tuple[Any, Any]] = {}
_PARSED_MAX = 1 << 16


class DataChecker(Checker):
    """The checker of a round given as its dataclasses (a RoundInput): each object is read
    through its Fields, a tuple is a list, and `replaced` ({kind: {key: JSON value}}, e.g.
    solve_round's keywords for "settings") replaces fields of the objects of that kind."""

    def __init__(self, replaced: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        super().__init__()
        self.replaced = replaced or {}

    def mapping(self, d: Any, where: str, kind: str | None = None) -> Mapping:
        """d's Fields if it is the dataclass of `kind` (else {} and a problem); without `kind`, d
        if it is a mapping (a node's slowdown, a job's throughput parameters by GPU type)."""
        if kind is None:
            return super().mapping(d, where)
        cls = CLASSES[kind]
        if not isinstance(d, cls):
            self.bad(where, f"must be a {cls.__name__}, got {type(d).__name__}")
            return {}
        replaced = self.replaced.get(kind)
        if replaced:
            self.known(replaced, kind, where)
        return Fields(d, cls, replaced)

    def is_list(self, v: Any) -> TypeGuard[list | tuple]:
        """Whether v is a list or a tuple (the dataclasses' lists)."""
        return isinstance(v, (list, tuple))

    def once(self, raw: Any, kind: str, parse: Callable[[], _T]) -> _T:
        """Checker.once, and across rounds: the very object of `kind` (frozen, so unchanged) that a
        round before parsed without problems is not parsed again. A replay hands every round the
        same few throughput parameters and batch limits, a third of checking a 7-job round."""
        if type(raw) is not CLASSES[kind] or self.replaced.get(kind):
            return super().once(raw, kind, parse)
        known = _PARSED.get((kind, id(raw)))
        if known is not None and known[0] is raw:
            return known[1]
        found = len(self.problems)
        value = super().once(raw, kind, parse)
        if len(self.problems) == found:
            if len(_PARSED) >= _PARSED_MAX:
                _PARSED.clear()
            _PARSED[kind, id(raw)] = (raw, value)  # holds raw: its id is not reused meanwhile
        return value

    def values_key(self, raw: Any, kind: str) -> tuple | None:
        """raw's field values where raw is exactly the dataclass of `kind` and each is a plain
        value (a number or a string, each of its type), else None."""
        cls = CLASSES[kind]
        if type(raw) is not cls:
            return None
        values = _VIEWS[cls].values(raw)
        return (kind, values) if all(type(v) in _PLAIN for v in values) else None

    def plain(self, raw: Any, kind: str) -> Mapping | None:
        """raw's fields where raw is exactly the dataclass of `kind`, else None."""
        return vars(raw) if type(raw) is CLASSES[kind] else None
