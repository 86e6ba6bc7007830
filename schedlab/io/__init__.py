"""Rounds and results as JSON, and the tables schedlab writes.

    schema   what the published JSON Schema (schedlab/schemas/) sets: keys, ranges, size limits
    checker  the checker every field passes, collecting each problem under its field's path;
             it reads a round's JSON, or its dataclasses through their fields
    parse    a round, its JSON or a RoundInput -> a checked RoundInput (cluster, settings, the
             round), every bad field in one InputError
    jobs     a round's jobs: throughput parameters, batch limits, freezing, the GPUs they hold
    encode   dataclasses -> JSON: rounds, results, errors; JSON text as schedlab writes it
    tables   CSV and Markdown/LaTeX tables of replays, sweeps and reports
"""

from __future__ import annotations

from schedlab.io.encode import (
    cluster_to_dict,
    error_to_dict,
    json_text,
    round_input_to_dict,
    round_result_from_dict,
    round_result_to_dict,
)
from schedlab.io.parse import load_json, parse_round_input
from schedlab.io.schema import (
    BATCH_NAMES,
    MAX_GPUS,
    MAX_GPUS_PER_NODE,
    MAX_ID_CHARS,
    MAX_JOBS,
    MAX_NODES,
    MAX_SLOWDOWN,
    PARAM_NAMES,
    PENALTY_NAMES,
    SCHEMA_KEYS,
)
from schedlab.io.tables import spreadsheet_safe, text_table

__all__ = [
    "BATCH_NAMES", "MAX_GPUS", "MAX_GPUS_PER_NODE", "MAX_ID_CHARS", "MAX_JOBS", "MAX_NODES", "MAX_SLOWDOWN",
    "PARAM_NAMES", "PENALTY_NAMES", "SCHEMA_KEYS", "cluster_to_dict", "error_to_dict", "json_text", "load_json",
    "parse_round_input", "round_input_to_dict", "round_result_from_dict", "round_result_to_dict", "spreadsheet_safe",
    "text_table",
]
