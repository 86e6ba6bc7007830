"""schedlab serve: rounds over HTTP with JSON, for schedulers that are not written in Python.

    POST /v1/solve          a round (schemas/round_input.schema.json) -> its result
                            (schemas/round_result.schema.json); 400 with every bad field
                            ({"error": "invalid_input", "problems": [...]}), 413 above the body
                            limit, 503 when every worker is busy and the queue is full
    GET  /v1/health         {"status": "ok", "version", "workers", "in_flight", "capacity"}
    GET  /v1/schema         the round input schema; /v1/schema/result the result's
    GET  /v1/registries     the formulations, solvers and policies a request may name
    POST /v1/policies/{policy}/rounds?state_id=ID
                            a round scheduled by a named policy of the registry (tiresias, ones,
                            pollux+pal, ...) whose state (queues, population) the service keeps
                            under ID from round to round; 409 if ID holds another policy
    DELETE /v1/states/{ID}  forget a policy state
    GET  /v1/openapi.json   this API as OpenAPI 3.1

Rounds are solved on a pool of processes (one per core by default), so a round never blocks
the server (a policy state's rounds run on threads of the server, one round per state at a
time); at most `workers + queue` rounds are admitted at once, the rest are told 503 with
Retry-After. A round's time limit is its own (settings.time_limit_s), at most the operator's
`max_time_limit_s`. Only the array solvers (highs, cpsat, portfolio) run unless the operator
enables more of the registry (`allow_solvers`): a request never names a program. SIGTERM stops
accepting connections and lets the rounds in flight finish (uvicorn's graceful shutdown).

A worker that dies (killed, out of memory) is replaced at once, and the round it was solving is
tried again once on another (schedlab.serve_pool).

Built on Starlette and uvicorn (the `serve` extra); the rounds are solve_round's, unchanged.
Who may call it (bearer tokens, each client with its own policy states) and TLS: serve_auth.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from schedlab import __version__
from schedlab.errors import InputError, SchedlabError
from schedlab.serve_auth import OPEN, BearerAuth, Clients, TLSFiles, client_of, with_bearer
from schedlab.serve_pool import RoundPool, WorkerDied
from schedlab.solvers.registry import array_solver_names
from schedlab.state import Settings

__all__ = ["ServeConfig", "make_app", "openapi", "serve", "solve_request"]

SCHEMAS = Path(__file__).parent / "schemas"
STATE_ID = re.compile(r"[A-Za-z0-9._-]{1,128}")  # a policy state's name


@dataclass(frozen=True)
class ServeConfig:
    """The operator's settings (never the request's)."""

    workers: int = field(default_factory=lambda: os.cpu_count() or 1)
    queue: int = 16  # rounds admitted beyond the busy workers before 503
    max_time_limit_s: float = 60.0
    max_body_bytes: int = 64 * 2**20  # the largest round the schema allows is ~40 MB
    allow_solvers: tuple[str, ...] = field(default_factory=array_solver_names)
    allow_solver_options: bool = False  # settings.solver_options reach the solver as they are
    max_states: int = 256  # policy states held at once


def solve_request(body: bytes, config: ServeConfig) -> tuple[int, dict[str, Any]]:
    """One request's round, solved in a worker process: (HTTP status, JSON body)."""
    from schedlab.api import solve_round
    from schedlab.io import error_to_dict, load_json, parse_round_input, round_result_to_dict

    try:
        raw = load_json(body, "body")
        settings = raw.get("settings", {}) if isinstance(raw, dict) else {}
        settings = settings if isinstance(settings, dict) else {}
        problems = _operator_limits(settings, config)
        if problems:  # with every other bad field of the round
            try:
                parse_round_input(raw)
            except InputError as exc:
                problems += exc.problems
            raise InputError(problems)
        limit_s = settings.get("time_limit_s", Settings.time_limit_s)
        capped = min(limit_s, config.max_time_limit_s) if isinstance(limit_s, (int, float)) else None
        return 200, round_result_to_dict(solve_round(raw, time_limit_s=capped))
    except InputError as exc:
        return 400, error_to_dict(exc)
    except SchedlabError as exc:
        return 500, error_to_dict(exc)


def _operator_limits(settings: dict, config: ServeConfig) -> list[str]:
    problems = []
    solver = settings.get("solver", "portfolio")
    if isinstance(solver, str) and solver not in config.allow_solvers:
        problems.append(f"settings.solver: {solver!r} is not enabled on this service; use one of "
                        f"{', '.join(config.allow_solvers)} (the operator enables others with --allow-solver)")
    if settings.get("solver_options") and not config.allow_solver_options:
        problems.append("settings.solver_options: this service takes no solver options (they could lift its time "
                        "limit or write files); leave them out (the operator allows them with --allow-solver-options)")
    return problems


class Admission:
    """At most `capacity` rounds in the service at once (running or queued for a worker)."""

    def __init__(self, capacity: int) -> None:
        self.capacity, self.in_flight = capacity, 0

    def try_enter(self) -> bool:
        """Admit one more round if below capacity; False when full (the caller answers 503)."""
        if self.in_flight >= self.capacity:
            return False
        self.in_flight += 1
        return True

    def leave(self) -> None:
        """An admitted round has finished."""
        self.in_flight -= 1


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    # allow_nan=False: no NaN or Infinity ever reaches a client (results use null)
    return Response(json.dumps(body, allow_nan=False), status, headers, media_type="application/json")


def openapi() -> dict[str, Any]:
    """This API as OpenAPI 3.1, with the published JSON schemas as its components."""
    round_input = json.loads((SCHEMAS / "round_input.schema.json").read_text())
    round_result = json.loads((SCHEMAS / "round_result.schema.json").read_text())
    error = {"type": "object", "required": ["error", "problems"], "properties": {
        "error": {"enum": ["invalid_input", "failed", "busy", "too_large", "conflict", "not_found"]},
        "problems": {"type": "array", "items": {"type": "string"}}}}
    as_json = lambda ref: {"content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{ref}"}}}}  # noqa: E731
    return with_bearer({
        "openapi": "3.1.0",
        "info": {"title": "schedlab", "version": __version__,
                 "description": "Every round of a GPU-cluster scheduler as an optimization model."},
        "paths": {
            "/v1/solve": {"post": {
                "summary": "Solve one round", "requestBody": {"required": True, **as_json("RoundInput")},
                "responses": {"200": {"description": "a verified allocation", **as_json("RoundResult")},
                              "400": {"description": "invalid round: every bad field", **as_json("Error")},
                              "413": {"description": "body above the service's limit", **as_json("Error")},
                              "503": {"description": "every worker busy, the queue full", **as_json("Error")}}}},
            "/v1/health": {"get": {"summary": "Liveness and load", "responses": {"200": {"description": "ok"}}}},
            "/v1/schema": {"get": {"summary": "The round input schema", "responses": {"200": {"description": "ok"}}}},
            "/v1/schema/result": {"get": {"summary": "The result schema", "responses": {"200": {"description": "ok"}}}},
            "/v1/registries": {"get": {"summary": "Formulations, solvers and policies by name",
                                       "responses": {"200": {"description": "ok"}}}},
            "/v1/policies/{policy}/rounds": {"post": {
                "summary": "One round of a named policy whose state the service keeps under state_id",
                "parameters": [{"name": "policy", "in": "path", "required": True, "schema": {"type": "string"}},
                               {"name": "state_id", "in": "query", "required": True,
                                "schema": {"type": "string", "pattern": STATE_ID.pattern}}],
                "requestBody": {"required": True, **as_json("RoundInput")},
                "responses": {"200": {"description": "the policy's verified allocation", **as_json("RoundResult")},
                              "400": {"description": "invalid round or policy", **as_json("Error")},
                              "409": {"description": "state_id holds another policy", **as_json("Error")},
                              "503": {"description": "busy, or too many states", **as_json("Error")}}}},
            "/v1/states/{state_id}": {"delete": {
                "summary": "Forget a policy state",
                "parameters": [{"name": "state_id", "in": "path", "required": True, "schema": {"type": "string"}}],
                "responses": {"204": {"description": "forgotten"}, "404": {"description": "no such state"}}}},
        },
        "components": {"schemas": {"RoundInput": round_input, "RoundResult": round_result, "Error": error}},
    })


@dataclass
class PolicyState:
    """A policy kept under a state_id: its registry name, the instance, and a lock (one round at a time)."""

    name: str
    policy: Any
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # one round at a time: rounds change the state


def schedule_with(policy: Any, body: bytes) -> tuple[int, dict[str, Any]]:
    """One round of a policy state, on a server thread: (HTTP status, JSON body)."""
    from schedlab.io import error_to_dict, load_json, parse_round_input, round_result_to_dict

    try:
        return 200, round_result_to_dict(policy.schedule(parse_round_input(load_json(body, "body"))))
    except InputError as exc:
        return 400, error_to_dict(exc)
    except SchedlabError as exc:
        return 500, error_to_dict(exc)


async def read_body(request: Request, limit: int) -> bytes | None:
    """The body, or None once it passes `limit` bytes: read in chunks, so a client that sends
    no Content-Length cannot make the server hold more than the limit."""
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def make_app(config: ServeConfig, clients: Clients = OPEN) -> Starlette:
    """The Starlette application serving the module docstring's API under the operator's `config`,
    to `clients` only (serve_auth: their bearer tokens; each sees its own policy states)."""
    admission = Admission(config.workers + config.queue)

    def too_large() -> Response:
        return _json({"error": "too_large", "problems": [
            f"body: over {config.max_body_bytes:,} bytes, the most this service takes"]}, 413)
    pool: dict[str, Any] = {}
    states: dict[tuple[str, str], PolicyState] = {}  # by (client, state_id)

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        pool["rounds"] = RoundPool(config.workers)
        pool["states"] = ThreadPoolExecutor(max_workers=config.workers)
        await pool["rounds"].start()
        try:
            yield
        finally:  # after uvicorn drained the requests in flight
            await pool["rounds"].close(grace_s=config.max_time_limit_s)
            pool["states"].shutdown(wait=True)

    async def solve(request: Request) -> Response:
        size = request.headers.get("content-length")
        if size is not None and size.isdigit() and int(size) > config.max_body_bytes:
            return _json({"error": "too_large", "problems": [
                f"body: {int(size):,} bytes; this service takes at most {config.max_body_bytes:,}"]}, 413)
        if not admission.try_enter():
            return _json({"error": "busy", "problems": [
                f"all {config.workers} workers busy and {config.queue} rounds queued; retry shortly"]}, 503,
                {"Retry-After": "1"})
        try:
            body = await read_body(request, config.max_body_bytes)
            if body is None:
                return too_large()
            try:
                status, out = await pool["rounds"].run(solve_request, body, config)
            except WorkerDied as exc:  # on its first worker and on the one that tried it again
                return _json({"error": "failed", "problems": [str(exc)]}, 500)
            return _json(out, status)
        finally:
            admission.leave()

    async def policy_round(request: Request) -> Response:
        from schedlab.errors import ConfigError
        from schedlab.policies import make_policy

        name, state_id = request.path_params["policy"], request.query_params.get("state_id", "")
        if not STATE_ID.fullmatch(state_id):
            return _json({"error": "invalid_input", "problems": [
                "state_id: required, 1-128 characters of letters, digits, '.', '_' or '-'"]}, 400)
        key = (client_of(request.scope), state_id)
        state = states.get(key)
        if state is None:
            if len(states) >= config.max_states:
                return _json({"error": "busy", "problems": [
                    f"{len(states)} policy states held, the most this service keeps; DELETE /v1/states/ID"]}, 503)
            try:
                state = states[key] = PolicyState(name, make_policy(name))
            except ConfigError as exc:
                return _json({"error": "invalid_input", "problems": [f"policy: {exc}"]}, 400)
        if state.name != name:
            return _json({"error": "conflict", "problems": [
                f"state_id {state_id!r} holds a {state.name} policy; use it with {state.name}, or another id"]}, 409)
        if not admission.try_enter():
            return _json({"error": "busy", "problems": ["every worker busy and the queue full; retry shortly"]},
                         503, {"Retry-After": "1"})
        try:
            body = await read_body(request, config.max_body_bytes)
            if body is None:
                return too_large()
            async with state.lock:
                status, out = await asyncio.get_running_loop().run_in_executor(
                    pool["states"], schedule_with, state.policy, body)
            return _json(out, status)
        finally:
            admission.leave()

    async def forget(request: Request) -> Response:
        if states.pop((client_of(request.scope), request.path_params["state_id"]), None) is None:
            return _json({"error": "not_found", "problems": ["state_id: no such state"]}, 404)
        return Response(status_code=204)

    async def health(_: Request) -> Response:
        return _json({"status": "ok", "version": __version__, "workers": config.workers,
                      "in_flight": admission.in_flight, "capacity": admission.capacity})

    async def registries(_: Request) -> Response:
        from schedlab.formulations import FORMULATIONS
        from schedlab.policies import policy_names

        return _json({"formulations": sorted(FORMULATIONS), "solvers": list(config.allow_solvers),
                      "policies": policy_names()})

    def static(document: dict[str, Any]):
        async def endpoint(_: Request) -> Response:
            return _json(document)
        return endpoint

    return Starlette(routes=[
        Route("/v1/solve", solve, methods=["POST"]),
        Route("/v1/health", health),
        Route("/v1/schema", static(json.loads((SCHEMAS / "round_input.schema.json").read_text()))),
        Route("/v1/schema/result", static(json.loads((SCHEMAS / "round_result.schema.json").read_text()))),
        Route("/v1/registries", registries),
        Route("/v1/policies/{policy}/rounds", policy_round, methods=["POST"]),
        Route("/v1/states/{state_id}", forget, methods=["DELETE"]),
        Route("/v1/openapi.json", static(openapi())),
    ], lifespan=lifespan, middleware=[Middleware(BearerAuth, clients=clients)])


def serve(config: ServeConfig, host: str = "127.0.0.1", port: int = 8080, graceful_s: int = 120,
          clients: Clients = OPEN, tls: TLSFiles | None = None) -> None:
    """Run until SIGTERM or SIGINT; rounds in flight get up to graceful_s to finish. With `clients`,
    only they are served; with `tls`, over HTTPS."""
    import uvicorn

    uvicorn.run(make_app(config, clients), host=host, port=port, timeout_graceful_shutdown=graceful_s, log_level="info",
                ssl_certfile=tls.certfile if tls else None, ssl_keyfile=tls.keyfile if tls else None)
