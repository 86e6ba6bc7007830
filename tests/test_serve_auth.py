"""schedlab serve admits only its clients: bearer tokens, TLS, a policy-state namespace per client,
and no open service on a network address. Real server processes on 127.0.0.1 and free ports."""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from schedlab.errors import ConfigError
from schedlab.serve_auth import check_bind, is_loopback, read_token_file, tls_files

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = json.loads((ROOT / "examples" / "round-16x4.json").read_text())
ALICE, BOB, ROTATED = "a" * 32, "b0b-" * 8, "alice-next-" * 3
TOKENS = f"# the service's clients\nalice:{ALICE}\n\n  bob:{BOB}  \nalice:{ROTATED}\n"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _schedlab(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "schedlab.cli", *args], capture_output=True, text=True, timeout=60)


class Server:
    """`schedlab serve` on 127.0.0.1 with these flags; HTTPS trusting `cafile` when given."""

    def __init__(self, *flags: str, cafile: Path | None = None) -> None:
        self.port = _free_port()
        self.context = ssl.create_default_context(cafile=str(cafile)) if cafile else None
        self.url = f"{'https' if cafile else 'http'}://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([sys.executable, "-m", "schedlab.cli", "serve", "--port", str(self.port),
                                      "--workers", "1", *flags],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                self.request("/v1/health")
                return
            except OSError:
                time.sleep(0.1)
        self.proc.kill()
        raise RuntimeError(f"server did not start: {self.proc.stdout.read()}")

    def request(self, path: str, body: bytes | None = None, token: str | None = None, method: str | None = None,
                authorization: str | None = None) -> tuple[int, dict, dict]:
        headers = {"Authorization": authorization or f"Bearer {token}"} if token or authorization else {}
        req = urllib.request.Request(self.url + path, data=body, headers=headers,
                                     method=method or ("POST" if body else "GET"))
        try:
            with urllib.request.urlopen(req, timeout=60, context=self.context) as resp:
                raw = resp.read()
                return resp.status, json.loads(raw) if raw else {}, dict(resp.headers)
        except urllib.error.HTTPError as err:
            raw = err.read()
            return err.code, json.loads(raw) if raw else {}, dict(err.headers)

    def rounds(self, policy: str, state_id: str, token: str) -> tuple[int, dict, dict]:
        return self.request(f"/v1/policies/{policy}/rounds?state_id={state_id}", json.dumps(EXAMPLE).encode(), token)

    def forget(self, state_id: str, token: str) -> int:
        return self.request(f"/v1/states/{state_id}", token=token, method="DELETE")[0]

    def stop(self) -> str:
        self.proc.send_signal(signal.SIGTERM)
        out, _ = self.proc.communicate(timeout=60)
        return out


@pytest.fixture(scope="module")
def token_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("tokens") / "tokens"
    path.write_text(TOKENS)
    return path


@pytest.fixture(scope="module")
def secured(token_file):
    srv = Server("--token-file", str(token_file))
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def certificate(tmp_path_factory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and localhost, and its key."""
    pytest.importorskip("cryptography", reason="the cryptography package makes the test's self-signed certificate")
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
            .sign(key, hashes.SHA256()))
    folder = tmp_path_factory.mktemp("tls")
    (folder / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                       serialization.NoEncryption()))
    return folder / "cert.pem", folder / "key.pem"


def test_a_token_file_names_its_clients(token_file):
    clients = read_token_file(token_file)
    assert clients.identify(f"Bearer {ALICE}") == "alice" == clients.identify(f"bearer  {ROTATED}")
    assert clients.identify(f"Bearer {BOB}") == "bob"
    for refused in (None, "", "Bearer", f"Basic {ALICE}", f"Bearer {ALICE}x", f"Bearer {ALICE[:-1]}", BOB):
        assert clients.identify(refused) is None
    unnamed = read_token_file(_write(token_file.parent / "unnamed", f"{ALICE}\n{BOB}\n"))
    one, other = unnamed.identify(f"Bearer {ALICE}"), unnamed.identify(f"Bearer {BOB}")
    assert one and other and one != other and ALICE not in one


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.parametrize(("text", "message"), [
    (f"alice:{ALICE}\nshort\n", r":2: the token has 5 characters, fewer than 16"),
    (f"# c\n\nbob:{BOB} {BOB}\n", r":3: the token must be letters, digits"),
    (f"bad name:{ALICE}\n", r":1: the NAME before ':' must be"),
    (f":{ALICE}\n", r":1: the NAME before ':' must be"),
    (f"alice:{ALICE}\nbob:{ALICE}\n", r":2: the token of line 1 again"),
    ("# nothing but comments\n\n", r"no token in it"),
])
def test_a_bad_token_file_is_told_with_its_file_and_line(tmp_path, text, message):
    path = _write(tmp_path / "tokens", text)
    with pytest.raises(ConfigError, match=rf"{path}.*{message}"):
        read_token_file(path)


def test_an_unreadable_token_file_is_told(tmp_path):
    with pytest.raises(ConfigError, match=f"--token-file {tmp_path / 'missing'}: cannot read it"):
        read_token_file(tmp_path / "missing")


def test_every_token_is_compared_whichever_matches(token_file, monkeypatch):
    import hmac

    from schedlab import serve_auth

    compared: list[bytes] = []
    compare = hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        compared.append(b)
        return compare(a, b)

    monkeypatch.setattr(serve_auth.hmac, "compare_digest", counting)
    clients = read_token_file(token_file)
    for token in (ALICE, ROTATED, "c" * 40):
        compared.clear()
        clients.identify(f"Bearer {token}")
        assert compared == [digest for digest, _ in clients.digests]  # all three, in order, each time


def test_only_loopback_addresses_are_loopback():
    for host in ("127.0.0.1", "127.8.9.10", "::1", "[::1]", "localhost", "LocalHost"):
        assert is_loopback(host), host
    for host in ("0.0.0.0", "::", "10.0.0.5", "192.168.1.2", "example.com", "localhost.example.com", ""):
        assert not is_loopback(host), host


def test_a_network_address_needs_tokens_or_insecure_and_tokens_want_tls():
    with pytest.raises(ConfigError, match="--host 0.0.0.0: not a loopback address.*--token-file PATH.*--insecure"):
        check_bind("0.0.0.0", tokens=False, tls=False, insecure=False)
    assert "without authentication" in check_bind("0.0.0.0", tokens=False, tls=False, insecure=True)[0]
    assert "clear text" in check_bind("10.0.0.5", tokens=True, tls=False, insecure=False)[0]
    assert check_bind("10.0.0.5", tokens=True, tls=True, insecure=False) == []
    assert check_bind("127.0.0.1", tokens=False, tls=False, insecure=False) == []


def test_tls_files_come_both_or_neither_and_must_load(tmp_path, certificate):
    cert, key = map(str, certificate)
    assert tls_files(None, None) is None
    assert tls_files(cert, key).keyfile == key
    with pytest.raises(ConfigError, match="--ssl-certfile without --ssl-keyfile: give both"):
        tls_files(cert, None)
    with pytest.raises(ConfigError, match="--ssl-keyfile without --ssl-certfile"):
        tls_files(None, key)
    with pytest.raises(ConfigError, match="cannot load them"):
        tls_files(cert, str(_write(tmp_path / "k.pem", "not a key")))


def test_the_cli_refuses_a_network_address_without_tokens_before_listening(tmp_path, token_file):
    port = str(_free_port())
    out = _schedlab("serve", "--host", "0.0.0.0", "--port", port)
    assert out.returncode == 2
    assert "--host 0.0.0.0: not a loopback address" in out.stderr and "--token-file" in out.stderr
    assert "--insecure" in out.stderr and "Uvicorn running" not in out.stderr
    out = _schedlab("serve", "--port", port, "--ssl-certfile", str(token_file))
    assert out.returncode == 2 and "--ssl-certfile without --ssl-keyfile" in out.stderr
    bad = _write(tmp_path / "tokens", "alice:tiny\n")
    out = _schedlab("serve", "--port", port, "--token-file", str(bad))
    assert out.returncode == 2 and f"{bad}:1: the token has 4 characters" in out.stderr


def test_a_request_needs_a_token_of_the_file(secured):
    body = json.dumps(EXAMPLE).encode()
    status, answer, _ = secured.request("/v1/solve", body, ALICE)
    assert status == 200 and answer["verified"]
    assert secured.request("/v1/solve", body, ROTATED)[0] == 200
    status, answer, headers = secured.request("/v1/solve", body)
    assert status == 401 and headers["www-authenticate"].startswith("Bearer")
    assert answer["error"] == "unauthorized" and answer["problems"][0].startswith("Authorization: missing")
    status, answer, headers = secured.request("/v1/solve", body, "x" * 32)
    assert status == 401 and 'error="invalid_token"' in headers["www-authenticate"]
    assert answer == {"error": "unauthorized", "problems": ["Authorization: this token is not one of the service's"]}
    assert secured.request("/v1/solve", body, authorization=f"Basic {ALICE}")[0] == 401
    for path in ("/v1/schema", "/v1/registries", "/v1/openapi.json"):
        assert secured.request(path)[0] == 401
        assert secured.request(path, token=BOB)[0] == 200
    assert secured.request("/v1/states/x", method="DELETE")[0] == 401


def test_health_stays_open_for_load_balancers(secured):
    status, answer, _ = secured.request("/v1/health")
    assert status == 200 and answer["status"] == "ok"


def test_the_openapi_document_declares_the_bearer_scheme(secured):
    api = secured.request("/v1/openapi.json", token=ALICE)[1]
    assert api["components"]["securitySchemes"]["bearer"] == {**api["components"]["securitySchemes"]["bearer"],
                                                              "type": "http", "scheme": "bearer"}
    assert api["security"] == [{"bearer": []}] and api["paths"]["/v1/health"]["get"]["security"] == []
    assert "401" in api["paths"]["/v1/solve"]["post"]["responses"]
    assert "unauthorized" in api["components"]["schemas"]["Error"]["properties"]["error"]["enum"]


def test_a_client_sees_replaces_and_deletes_only_its_own_states(secured):
    assert secured.rounds("tiresias", "shared", ALICE)[0] == 200
    assert secured.forget("shared", BOB) == 404  # alice's state is not bob's to see
    assert secured.rounds("fifo", "shared", BOB)[0] == 200  # bob's own state under the same name
    assert secured.forget("shared", BOB) == 204
    assert secured.forget("shared", BOB) == 404
    status, answer, _ = secured.rounds("fifo", "shared", ALICE)  # alice's tiresias state is still there
    assert status == 409 and "holds a tiresias policy" in answer["problems"][0]
    assert secured.rounds("tiresias", "shared", ROTATED)[0] == 200  # alice's other token: alice's states
    assert secured.forget("shared", ROTATED) == 204 and secured.forget("shared", ALICE) == 404


def test_the_shell_client_sends_its_token(secured):
    client, round_file = ROOT / "examples" / "schedlab-client.sh", ROOT / "examples" / "round-16x4.json"
    env = {k: v for k, v in os.environ.items() if k != "SCHEDLAB_TOKEN"}
    refused = subprocess.run([str(client), str(round_file), secured.url], capture_output=True, text=True, env=env)
    assert refused.returncode == 1 and "unauthorized" in refused.stderr
    ok = subprocess.run([str(client), str(round_file), secured.url], capture_output=True, text=True,
                        env={**env, "SCHEDLAB_TOKEN": BOB})
    assert ok.returncode == 0 and ok.stdout.startswith("status optimal")


def test_over_tls_a_client_verifies_the_service_and_sends_its_token(token_file, certificate):
    cert, key = certificate
    srv = Server("--token-file", str(token_file), "--ssl-certfile", str(cert), "--ssl-keyfile", str(key), cafile=cert)
    try:
        assert srv.url.startswith("https://")
        status, answer, _ = srv.request("/v1/solve", json.dumps(EXAMPLE).encode(), ALICE)
        assert status == 200 and answer["verified"]
        assert srv.request("/v1/registries")[0] == 401
        with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
            urllib.request.urlopen(srv.url + "/v1/health", timeout=10, context=ssl.create_default_context())
        with pytest.raises((urllib.error.URLError, ConnectionError)):  # plain HTTP to a TLS port
            urllib.request.urlopen(f"http://127.0.0.1:{srv.port}/v1/health", timeout=10)
    finally:
        out = srv.stop()
    assert "Traceback" not in out

