"""What the published round schema (schedlab/schemas/round_input.schema.json) sets for the parser.

Each object's keys and each number's type and range are read from the schema: whatever it does
not list, or lists out of range, the parser rejects, so the two cannot drift. The size of a round
is read from it too (maxItems, maximum, maxLength), with its GPUs in all.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from schedlab.state import BatchLimits, FreezePenalty, ThroughputParams

__all__ = [
    "BATCH_NAMES", "FIELD_ACCEPT", "FIELD_RULES", "MAX_GPUS", "MAX_GPUS_PER_NODE", "MAX_ID_CHARS", "MAX_JOBS",
    "MAX_NODES", "MAX_SLOWDOWN", "OPTION_NAME", "OPTION_NUMBER", "OPTION_TEXT", "OPTIONS_SPEC", "PARAM_NAMES",
    "PENALTY_NAMES", "SCHEMA", "SCHEMA_KEYS", "Accept",
]

PARAM_NAMES = tuple(ThroughputParams.__dataclass_fields__)
PENALTY_NAMES = tuple(FreezePenalty.__dataclass_fields__)
BATCH_NAMES = tuple(BatchLimits.__dataclass_fields__)

SCHEMA = json.loads((Path(__file__).parents[1] / "schemas" / "round_input.schema.json").read_text())


def _schema_objects(schema: Mapping) -> dict[str, Mapping]:
    """Each kind of object of a round, its node in the published schema."""
    props, defs = schema["properties"], schema["$defs"]
    cluster, job, freezing = props["cluster"]["properties"], props["jobs"]["items"], defs["freezing"]
    return {
        "round": schema, "cluster": props["cluster"], "node": cluster["nodes"]["items"],
        "topology": cluster["topology"], "rack": cluster["topology"]["properties"]["racks"]["items"],
        "job": job, "grad_stats": job["properties"]["grad_stats"], "batch": job["properties"]["batch"],
        "settings": props["settings"], "freezing": freezing, "group": freezing["properties"]["groups"]["items"],
        "penalty": freezing["properties"]["penalty"], "gpu": defs["gpu"], "params": defs["params"],
    }


_OBJECTS = _schema_objects(SCHEMA)
SCHEMA_KEYS = {kind: frozenset(node["properties"]) for kind, node in _OBJECTS.items()}
# The largest round measured (README, Benchmark: 65,536 GPUs, 32,768 jobs) is the limit, so that a
# round's time limit holds (within ~2x) whatever its size.
MAX_NODES = SCHEMA["properties"]["cluster"]["properties"]["nodes"]["maxItems"]
MAX_GPUS_PER_NODE = _OBJECTS["node"]["properties"]["gpus"]["maximum"]
MAX_JOBS = SCHEMA["properties"]["jobs"]["maxItems"]
MAX_ID_CHARS = _OBJECTS["job"]["properties"]["id"]["maxLength"]
MAX_GPUS = 65_536
MAX_SLOWDOWN = _OBJECTS["node"]["properties"]["slowdown"]["additionalProperties"]["items"]["maximum"]

OPTIONS_SPEC = _OBJECTS["settings"]["properties"]["solver_options"]
OPTION_NAME = re.compile(OPTIONS_SPEC["propertyNames"]["pattern"])
OPTION_NUMBER, OPTION_TEXT = (next(s for s in OPTIONS_SPEC["additionalProperties"]["oneOf"] if s["type"] == t)
                              for t in ("number", "string"))


def _types(spec: Mapping) -> set[str]:
    return set(spec.get("type", []) if isinstance(spec.get("type"), list) else [spec.get("type")])


def _rules(spec: Mapping) -> dict[str, Any]:
    types = _types(spec)
    return {"minimum": spec.get("minimum"), "positive": "exclusiveMinimum" in spec, "integer": "integer" in types,
            "maximum": spec.get("maximum")}


# Per object kind, per numeric key: the schema's type and range as Checker.number takes them.
FIELD_RULES = {kind: {key: _rules(spec) for key, spec in node["properties"].items()
                      if {"number", "integer"} & _types(spec)}
               for kind, node in _OBJECTS.items()}


class Accept(NamedTuple):
    """A rule as the ranges a plain int or float within it falls in: the common, valid case is
    two comparisons (a round of 8,000 jobs reads ~200,000 numbers); anything else, NaN and
    infinities included (they fail the comparisons), goes to number_problem for its message."""

    float_lo: float  # floats in [float_lo, float_hi] are valid; integer fields take none here
    float_hi: float
    int_lo: int
    int_hi: int
    positive: bool
    integer: bool


def _accept(minimum: float | None, positive: bool, integer: bool, maximum: float | None) -> Accept:
    lo = -math.inf if minimum is None else minimum
    hi = sys.float_info.max if maximum is None else maximum
    return Accept(math.inf if integer else lo, -math.inf if integer else hi,
                  math.ceil(max(lo, -(2**53))), math.floor(min(hi, 2**53)), positive, integer)


FIELD_ACCEPT = {kind: {key: _accept(**rules) for key, rules in keys.items()} for kind, keys in FIELD_RULES.items()}
