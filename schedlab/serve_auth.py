"""Admitting only its clients: the bearer tokens, TLS files and bind rule of `schedlab serve`.

A token file holds one token a line, `TOKEN` or `NAME:TOKEN` (blank lines and `#` comments are
skipped). A token is RFC 6750's b64token (letters, digits, `-._~+/`, then `=` padding), at least
16 characters: `openssl rand -hex 32` makes one. A client's identity is the token's NAME, or
the token's SHA-256 when it has none; two tokens may share a NAME (a token being rotated), and
their clients share its policy states. With tokens, every request but `GET /v1/health` (left
open for load balancers' probes; it tells only liveness, version and load) must carry
`Authorization: Bearer TOKEN`, else 401 with `WWW-Authenticate: Bearer`. The presented token's
digest is compared with every token's in constant time, whichever matches.

The service refuses a non-loopback address without tokens unless the operator says
`--insecure`, and warns when tokens would cross a network in clear text. Nothing here imports
Starlette at load time, so the loopback rule serves the sweeps' Dask check (sweep.run) too.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import re
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from schedlab.errors import ConfigError

if TYPE_CHECKING:
    from starlette.responses import Response
    from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["CLIENT", "OPEN", "BearerAuth", "Clients", "TLSFiles", "check_bind", "client_of", "is_loopback",
           "read_token_file", "tls_files", "with_bearer"]

CLIENT = "schedlab.client"  # the ASGI scope key holding the authenticated client's identity
TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")  # RFC 6750 b64token: never a ':' or a space
NAME = re.compile(r"[A-Za-z0-9._-]{1,128}")
MIN_TOKEN_CHARS = 16
OPEN_PATHS = ("/v1/health",)  # answered without a token: load balancers probe it
REALM = 'Bearer realm="schedlab"'


def _digest(token: str) -> bytes:
    # equal-length digests: compare_digest then leaks neither the tokens' lengths nor a prefix
    return hashlib.sha256(token.encode("latin-1")).digest()


@dataclass(frozen=True)
class Clients:
    """The service's clients: each token's SHA-256 with its client's identity; none, an open service."""

    digests: tuple[tuple[bytes, str], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.digests)

    def identify(self, authorization: str | None) -> str | None:
        """The identity of the client presenting `authorization` (an Authorization header), or
        None for a missing, malformed or unknown token. Every token is compared, in constant
        time, whichever matches: the answer's timing tells nothing about the tokens."""
        scheme, _, presented = (authorization or "").partition(" ")
        presented = presented.strip()
        if scheme.lower() != "bearer" or not presented:
            return None
        digest = _digest(presented)
        found = None
        for known, identity in self.digests:
            match = hmac.compare_digest(digest, known)
            found = identity if match else found
        return found


OPEN = Clients()


def read_token_file(path: str | Path) -> Clients:
    """The clients of a token file (the module docstring's format).

    Raises
    ------
    ConfigError
        The file is unreadable or holds no token, or a line is not a token (naming the file and
        line), or a token appears twice.
    """
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--token-file {path}: cannot read it ({getattr(exc, 'strerror', None) or exc})") from None
    seen: dict[bytes, int] = {}
    digests = []
    for number, line in enumerate(lines, start=1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        name, sep, token = text.rpartition(":")
        problem = _token_problem(name, sep, token)
        if problem:
            raise ConfigError(f"{path}:{number}: {problem}; a line is TOKEN or NAME:TOKEN "
                              "(a token from e.g. `openssl rand -hex 32`)")
        digest = _digest(token)
        if digest in seen:
            raise ConfigError(f"{path}:{number}: the token of line {seen[digest]} again; give each client its own")
        seen[digest] = number
        digests.append((digest, name if sep else "#" + digest.hex()))  # '#': no NAME has one
    if not digests:
        raise ConfigError(f"--token-file {path}: no token in it; add one a line (e.g. `openssl rand -hex 32`)")
    return Clients(tuple(digests))


def _token_problem(name: str, sep: str, token: str) -> str | None:
    """What is wrong with a token line's NAME and TOKEN, or None."""
    if sep and not NAME.fullmatch(name):
        return "the NAME before ':' must be 1-128 letters, digits, '.', '_' or '-'"
    if not TOKEN.fullmatch(token):
        return "the token must be letters, digits and -._~+/ (then = padding), with no space"
    if len(token) < MIN_TOKEN_CHARS:
        return f"the token has {len(token)} characters, fewer than {MIN_TOKEN_CHARS}"
    return None


def client_of(scope: Scope) -> str:
    """The identity the request's token named, whose policy states it sees; '' on an open service
    (one namespace)."""
    return scope.get(CLIENT, "")


class BearerAuth:
    """ASGI middleware: a request to a path but OPEN_PATHS needs a known bearer token (401
    otherwise, with a JSON error body as the service's others); the client's identity goes into
    the scope under CLIENT. Passes everything through when `clients` is empty."""

    def __init__(self, app: ASGIApp, clients: Clients) -> None:
        self.app, self.clients = app, clients

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer 401, or pass the request on with its client's identity."""
        if scope["type"] != "http" or not self.clients or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        from starlette.datastructures import Headers

        authorization = Headers(scope=scope).get("authorization")
        identity = self.clients.identify(authorization)
        if identity is None:
            await _unauthorized(authorization is not None)(scope, receive, send)
            return
        scope[CLIENT] = identity
        await self.app(scope, receive, send)


def _unauthorized(presented: bool) -> Response:
    from starlette.responses import Response

    problem = ("Authorization: this token is not one of the service's" if presented else
               "Authorization: missing; send `Authorization: Bearer TOKEN` with a token the operator gave you")
    challenge = f'{REALM}, error="invalid_token"' if presented else REALM
    body = json.dumps({"error": "unauthorized", "problems": [problem]})  # as serve's other errors are written
    return Response(body, 401, {"WWW-Authenticate": challenge}, media_type="application/json")


def is_loopback(host: str) -> bool:
    """Whether `host` is a loopback address (127.0.0.0/8, ::1) or `localhost`; a name that could
    resolve elsewhere, '' and the wildcard addresses are not."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, tokens: bool, tls: bool, insecure: bool) -> list[str]:
    """The warnings for serving on `host`; refuses a non-loopback host without tokens unless
    `insecure`.

    Raises
    ------
    ConfigError
        A non-loopback host with neither tokens nor `insecure`: anyone who reaches it could
        solve rounds and read, replace or delete every policy state.
    """
    if is_loopback(host):
        return []
    if not tokens and not insecure:
        raise ConfigError(f"--host {host}: not a loopback address, and without --token-file anyone who reaches it "
                          "may use the service and every policy state; give --token-file PATH (and --ssl-certfile, "
                          "--ssl-keyfile), or --insecure on a network you trust")
    if not tokens:
        return [f"--host {host} with --insecure: serving without authentication"]
    if not tls:
        return [f"--host {host}: bearer tokens cross the network in clear text without --ssl-certfile and "
                "--ssl-keyfile (unless a TLS proxy in front of the service terminates it)"]
    return []


@dataclass(frozen=True)
class TLSFiles:
    """The service's certificate chain and private key (PEM files), for uvicorn's ssl_certfile and ssl_keyfile."""

    certfile: str
    keyfile: str


def tls_files(certfile: str | None, keyfile: str | None) -> TLSFiles | None:
    """The TLS files given, both or neither; checked by loading them, so a missing file or a key
    that is not the certificate's is told before the service starts.

    Raises
    ------
    ConfigError
        One file without the other, or files that do not load as a certificate and its key.
    """
    if certfile is None and keyfile is None:
        return None
    if certfile is None or keyfile is None:
        given, missing = ("--ssl-certfile", "--ssl-keyfile") if certfile else ("--ssl-keyfile", "--ssl-certfile")
        raise ConfigError(f"{given} without {missing}: give both (the certificate chain and its private key), "
                          "or neither for plain HTTP")
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(certfile, keyfile)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"--ssl-certfile {certfile} --ssl-keyfile {keyfile}: cannot load them "
                          f"({getattr(exc, 'strerror', None) or exc}); give a PEM certificate chain and its key") from None
    return TLSFiles(certfile, keyfile)


def with_bearer(document: dict[str, Any]) -> dict[str, Any]:
    """An OpenAPI document with the bearer scheme: required by every operation but OPEN_PATHS',
    which answer 401 without it; the Error schema gains 'unauthorized'."""
    unauthorized = {"description": "no token, or not one of the service's (when it runs with --token-file)",
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    paths = {path: {method: {**op, "security": []} if path in OPEN_PATHS else
                    {**op, "responses": dict(sorted({**op["responses"], "401": unauthorized}.items()))}
                    for method, op in methods.items()}
             for path, methods in document["paths"].items()}
    schemas = document["components"]["schemas"]
    error = schemas["Error"]
    codes = error["properties"]["error"]["enum"]
    error = {**error, "properties": {**error["properties"], "error": {"enum": [*codes, "unauthorized"]}}}
    scheme = {"type": "http", "scheme": "bearer", "description":
              "A token of the operator's --token-file, as `Authorization: Bearer TOKEN`; a service started "
              "without one (loopback, one tenant) takes requests without it. A client sees only its own "
              "policy states."}
    return {**document, "paths": paths, "security": [{"bearer": []}],
            "components": {**document["components"], "schemas": {**schemas, "Error": error},
                           "securitySchemes": {"bearer": scheme}}}
