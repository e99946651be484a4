"""The metrics server, for real: sockets on 127.0.0.1, certificates made by the openssl CLI, urllib as the client."""

from __future__ import annotations

import base64
import gzip
import os
import shutil
import socket
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import pytest
import yaml
from prometheus_client import CollectorRegistry, Gauge

from oomwatch.agent.serve.http import MetricsServer, parse_listen
from oomwatch.agent.serve.webconfig import WebConfig, load_web_config
from oomwatch.errors import ConfigError, OomwatchError
from tests.conftest import require_tool

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "deploy" / "web-config.example.yaml"
HASH = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()


# --- helpers -------------------------------------------------------------------------------------


def openssl_cert(directory: Path, name: str, cn: str, san: str | None = None) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command")
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    cmd = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={cn}", "-days", "1"]
    if san:
        cmd += ["-addext", f"subjectAltName={san}"]
    subprocess.run([*cmd, "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True, timeout=60)
    return cert, key


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("certs")
    server_crt, server_key = openssl_cert(d, "server", "127.0.0.1", "IP:127.0.0.1")
    other_crt, other_key = openssl_cert(d, "other", "127.0.0.1", "IP:127.0.0.1")
    client_crt, client_key = openssl_cert(d, "client", "oomwatch-test-client")
    return {
        "server.crt": server_crt,
        "server.key": server_key,
        "other.crt": other_crt,
        "other.key": other_key,
        "client.crt": client_crt,
        "client.key": client_key,
    }


@pytest.fixture
def registry() -> CollectorRegistry:
    reg = CollectorRegistry()
    Gauge("oomwatch_test_value", "A value for the tests.", registry=reg).set(42)
    Gauge("oomwatch_test_other", "Another value.", ["rank"], registry=reg).labels("0").set(7)
    return reg


@pytest.fixture
def serve(registry: CollectorRegistry) -> Iterator:
    """serve(web_config=None, listen="127.0.0.1:0") -> a started MetricsServer, stopped after the test."""
    servers: list[MetricsServer] = []

    def start(web_config: WebConfig | None = None, listen: str = "127.0.0.1:0") -> MetricsServer:
        server = MetricsServer(registry, listen, web_config)
        server.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def get(
    url: str, *, context: ssl.SSLContext | None = None, headers: dict[str, str] | None = None, method: str = "GET"
) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10, context=context) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, dict(exc.headers), exc.read()


def client_context(ca: Path, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(ca))
    if cert is not None:
        ctx.load_cert_chain(cert, key)
    return ctx


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def write_config(tmp_path: Path, data: object, name: str = "web.yaml") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data), encoding="utf-8")
    return path


def tls_config(tmp_path: Path, certs: dict[str, Path], **extra: object) -> WebConfig:
    data: dict = {"tls_server_config": {"cert_file": str(certs["server.crt"]), "key_file": str(certs["server.key"])}}
    for key, value in extra.items():
        if key == "basic_auth_users":
            data[key] = value
        else:
            data["tls_server_config"][key] = value
    return load_web_config(write_config(tmp_path, data))


# --- plain HTTP ----------------------------------------------------------------------------------


def test_plain_http_endpoints(serve) -> None:
    server = serve()
    host, port = server.address
    assert host == "127.0.0.1" and port > 0
    assert server.url == f"http://127.0.0.1:{port}/metrics"

    status, headers, body = get(server.url)
    assert status == 200
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
    assert "oomwatch_test_value 42.0" in body.decode()
    assert 'oomwatch_test_other{rank="0"} 7.0' in body.decode()

    status, headers, body = get(f"http://127.0.0.1:{port}/")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert b'href="metrics"' in body

    assert get(f"http://127.0.0.1:{port}/-/healthy")[::2] == (200, b"OK\n")
    assert get(f"http://127.0.0.1:{port}/nope")[0] == 404
    assert get(f"http://127.0.0.1:{port}/metrics/extra")[0] == 404

    status, headers, body = get(server.url, method="HEAD")
    assert status == 200 and body == b"" and int(headers["Content-Length"]) > 0


def test_openmetrics_gzip_and_name_filter(serve) -> None:
    server = serve()
    status, headers, body = get(server.url, headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    assert status == 200
    assert headers["Content-Type"].startswith("application/openmetrics-text")
    assert body.endswith(b"# EOF\n")

    status, headers, body = get(server.url, headers={"Accept-Encoding": "gzip"})
    assert status == 200 and headers["Content-Encoding"] == "gzip"
    assert b"oomwatch_test_value 42.0" in gzip.decompress(body)

    _, _, body = get(server.url + "?name[]=oomwatch_test_value")
    assert b"oomwatch_test_value 42.0" in body and b"oomwatch_test_other" not in body


def test_a_failing_collector_fails_the_scrape_not_the_server(serve, registry: CollectorRegistry) -> None:
    class Broken:
        def collect(self):
            raise RuntimeError("sensor unplugged")

    server = serve()
    broken = Broken()
    registry.register(broken)  # type: ignore[arg-type]
    status, _, body = get(server.url)
    assert status == 500 and b"sensor unplugged" in body
    registry.unregister(broken)  # type: ignore[arg-type]
    assert get(server.url)[0] == 200


def test_promtool_accepts_the_exposition(serve) -> None:
    promtool = require_tool("promtool", "apt-get install prometheus")
    _, _, body = get(serve().url)
    result = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True, timeout=60)
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()


# --- TLS -----------------------------------------------------------------------------------------


def test_https_scrape(serve, tmp_path: Path, certs: dict[str, Path]) -> None:
    server = serve(tls_config(tmp_path, certs))
    assert server.url.startswith("https://127.0.0.1:")
    status, _, body = get(server.url, context=client_context(certs["server.crt"]))
    assert status == 200 and b"oomwatch_test_value 42.0" in body
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        get(server.url, context=client_context(certs["other.crt"]))  # a client that does not trust it


def test_tls13_only(serve, tmp_path: Path, certs: dict[str, Path]) -> None:
    server = serve(tls_config(tmp_path, certs, min_version="TLS13"))
    old = client_context(certs["server.crt"])
    old.maximum_version = ssl.TLSVersion.TLSv1_2
    with pytest.raises(OSError):
        get(server.url, context=old)
    assert get(server.url, context=client_context(certs["server.crt"]))[0] == 200


def test_bad_clients_do_not_stop_the_tls_server(serve, tmp_path: Path, certs: dict[str, Path]) -> None:
    server = serve(tls_config(tmp_path, certs))
    host, port = server.address

    status, _, body = get(f"http://{host}:{port}/metrics")  # plain HTTP to the TLS port
    assert status == 400 and b"HTTP request to an HTTPS server" in body

    with socket.create_connection((host, port), timeout=10):
        pass  # connect and hang up
    with socket.create_connection((host, port), timeout=10):  # connect and say nothing: accept() goes on
        assert get(server.url, context=client_context(certs["server.crt"]))[0] == 200
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(b"\x16\x03\x01\x00\x05garbage")  # looks like TLS, is not
        sock.recv(100)
    with pytest.raises(urllib.error.URLError):
        get(server.url, context=client_context(certs["other.crt"]))  # handshake fails on the client's side

    status, _, body = get(server.url, context=client_context(certs["server.crt"]))
    assert status == 200 and b"oomwatch_test_value 42.0" in body


def test_client_certificate_required(serve, tmp_path: Path, certs: dict[str, Path]) -> None:
    wc = tls_config(
        tmp_path, certs, client_auth_type="RequireAndVerifyClientCert", client_ca_file=str(certs["client.crt"])
    )
    server = serve(wc)
    with pytest.raises(OSError):  # refused in the handshake (TLS 1.3: on the first read)
        get(server.url, context=client_context(certs["server.crt"]))
    with pytest.raises(OSError):  # a certificate the CA did not sign
        get(server.url, context=client_context(certs["server.crt"], certs["other.crt"], certs["other.key"]))
    ok = client_context(certs["server.crt"], certs["client.crt"], certs["client.key"])
    assert get(server.url, context=ok)[0] == 200


def test_client_certificate_if_given(serve, tmp_path: Path, certs: dict[str, Path]) -> None:
    wc = tls_config(
        tmp_path, certs, client_auth_type="VerifyClientCertIfGiven", client_ca_file=str(certs["client.crt"])
    )
    server = serve(wc)
    assert get(server.url, context=client_context(certs["server.crt"]))[0] == 200
    ok = client_context(certs["server.crt"], certs["client.crt"], certs["client.key"])
    assert get(server.url, context=ok)[0] == 200


def test_rotated_certificate_is_picked_up(serve, tmp_path: Path, certs: dict[str, Path]) -> None:
    crt, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    shutil.copy(certs["server.crt"], crt)
    shutil.copy(certs["server.key"], key)
    server = serve(
        load_web_config(write_config(tmp_path, {"tls_server_config": {"cert_file": "tls.crt", "key_file": "tls.key"}}))
    )
    assert get(server.url, context=client_context(certs["server.crt"]))[0] == 200
    # as a Kubernetes secret volume does it: new files, renamed into place
    shutil.copy(certs["other.crt"], tmp_path / "new.crt")
    shutil.copy(certs["other.key"], tmp_path / "new.key")
    os.replace(tmp_path / "new.key", key)
    os.replace(tmp_path / "new.crt", crt)
    assert get(server.url, context=client_context(certs["other.crt"]))[0] == 200
    with pytest.raises(urllib.error.URLError):
        get(server.url, context=client_context(certs["server.crt"]))


# --- basic auth ----------------------------------------------------------------------------------


def test_basic_auth(serve, tmp_path: Path) -> None:
    path = write_config(tmp_path, {"basic_auth_users": {"prometheus": HASH, "alice": HASH.replace("$2b$", "$2y$")}})
    server = serve(load_web_config(path))
    root = server.url.removesuffix("metrics")

    status, _, body = get(server.url, headers=basic("prometheus", "s3cret"))
    assert status == 200 and b"oomwatch_test_value 42.0" in body
    assert get(server.url, headers=basic("prometheus", "s3cret"))[0] == 200  # from the cache this time
    assert get(server.url, headers=basic("alice", "s3cret"))[0] == 200  # $2y$ (htpasswd) hashes
    assert get(root + "-/healthy", headers=basic("prometheus", "s3cret"))[0] == 200

    for headers in (
        {},  # no credentials
        basic("prometheus", "wrong"),
        basic("prometheus", ""),
        basic("mallory", "s3cret"),  # unknown user
        basic("prometheus", "s3cret" + "x" * 100),  # longer than bcrypt reads
        {"Authorization": "Basic !!!not-base64"},
        {"Authorization": "Basic " + base64.b64encode(b"prometheus-no-colon").decode()},
        {"Authorization": "Bearer s3cret"},
    ):
        status, resp_headers, body = get(server.url, headers=headers)
        assert status == 401, headers
        assert resp_headers["WWW-Authenticate"] == 'Basic realm="oomwatch"'
        assert b"oomwatch_test_value" not in body
    assert get(root + "-/healthy")[0] == 401
    assert get(root)[0] == 401


def test_example_file_with_tls_client_certs_and_basic_auth(serve, tmp_path: Path, certs: dict[str, Path]) -> None:
    text = EXAMPLE.read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    assert set(data) == {"tls_server_config", "basic_auth_users"}
    assert set(data["tls_server_config"]) == {
        "cert_file", "key_file", "client_auth_type", "client_ca_file", "min_version"
    }  # fmt: skip
    for key, name in (("tls.crt", "server.crt"), ("tls.key", "server.key"), ("ca.crt", "client.crt")):
        text = text.replace(f"/etc/oomwatch/tls/{key}", str(certs[name]))
    server = serve(load_web_config(write_config(tmp_path, text)))
    ok = client_context(certs["server.crt"], certs["client.crt"], certs["client.key"])
    status, _, body = get(server.url, context=ok, headers=basic("prometheus", "change-me"))
    assert status == 200 and b"oomwatch_test_value 42.0" in body
    assert get(server.url, context=ok, headers=basic("prometheus", "wrong"))[0] == 401


# --- load_web_config -----------------------------------------------------------------------------


def test_load_web_config_accepts(tmp_path: Path, certs: dict[str, Path]) -> None:
    empty = load_web_config(write_config(tmp_path, ""))
    assert empty.tls is None and dict(empty.basic_auth_users) == {}

    data = {"tls_server_config": {}, "http_server_config": {"http2": True, "headers": {"X-Frame-Options": "deny"}}}
    assert load_web_config(write_config(tmp_path, data)).tls is None

    shutil.copy(certs["server.crt"], tmp_path / "s.crt")
    shutil.copy(certs["server.key"], tmp_path / "s.key")
    sub = tmp_path / "conf"
    sub.mkdir()
    data = {
        "tls_server_config": {"cert_file": "../s.crt", "key_file": "../s.key", "prefer_server_cipher_suites": True},
        "basic_auth_users": {"prometheus": HASH, 1234: HASH},
    }
    wc = load_web_config(write_config(sub, data))
    assert wc.tls is not None and wc.tls.cert_file.resolve() == (tmp_path / "s.crt").resolve()
    assert wc.tls.client_auth_type == "NoClientCert" and wc.tls.min_version == "TLS12"
    assert dict(wc.basic_auth_users) == {"prometheus": HASH, "1234": HASH}
    assert HASH not in repr(wc)


def _bad_cases(certs: dict[str, Path], tmp: Path) -> list[tuple[str, object, list[str]]]:
    crt, key = str(certs["server.crt"]), str(certs["server.key"])
    tls = {"cert_file": crt, "key_file": key}
    garbage = tmp / "garbage.pem"
    garbage.write_text("not a certificate\n")
    encrypted_key = tmp / "encrypted.key"
    subprocess.run(
        ["openssl", "pkey", "-in", key, "-aes256", "-passout", "pass:abc", "-out", str(encrypted_key)],
        check=True,
        capture_output=True,
    )
    return [
        ("yaml", "tls_server_config: [unclosed\n", ["not valid YAML", "line "]),
        ("not-a-mapping", "- a\n- b\n", ["expected a mapping", "a list"]),
        ("unknown-top", {"tls_config": tls}, ["unknown key 'tls_config'", "tls_server_config"]),
        ("unknown-tls", {"tls_server_config": {**tls, "certfile": crt}}, ["'tls_server_config.certfile'"]),
        ("unsupported", {"tls_server_config": {**tls, "cipher_suites": ["X"]}}, ["cipher_suites", "not supported"]),
        ("no-cert-key", {"tls_server_config": {"key_file": key}}, ["tls_server_config.cert_file is missing"]),
        ("no-key-key", {"tls_server_config": {"cert_file": crt}}, ["tls_server_config.key_file is missing"]),
        ("missing-cert", {"tls_server_config": {**tls, "cert_file": "/nonexistent/x.crt"}},
         ["tls_server_config.cert_file", "/nonexistent/x.crt", "does not exist"]),
        ("missing-key", {"tls_server_config": {**tls, "key_file": "/nonexistent/x.key"}},
         ["tls_server_config.key_file", "/nonexistent/x.key", "does not exist"]),
        ("missing-ca", {"tls_server_config": {**tls, "client_ca_file": "nope.crt",
                                              "client_auth_type": "RequireAndVerifyClientCert"}},
         ["tls_server_config.client_ca_file", "nope.crt", "does not exist"]),
        ("dir-cert", {"tls_server_config": {**tls, "cert_file": str(tmp)}}, ["cert_file", "is not a file"]),
        ("garbage-cert", {"tls_server_config": {**tls, "cert_file": str(garbage)}},
         ["cannot load cert_file", str(garbage)]),
        ("mismatched-key", {"tls_server_config": {**tls, "key_file": str(certs["other.key"])}},
         ["cannot load cert_file", "key values mismatch"]),
        ("encrypted-key", {"tls_server_config": {**tls, "key_file": str(encrypted_key)}},
         ["tls_server_config.key_file", "encrypted"]),
        ("garbage-ca", {"tls_server_config": {**tls, "client_ca_file": str(garbage),
                                              "client_auth_type": "RequireAndVerifyClientCert"}},
         ["tls_server_config.client_ca_file", "cannot load", str(garbage)]),
        ("bad-auth-type", {"tls_server_config": {**tls, "client_auth_type": "RequestClientCert"}},
         ["tls_server_config.client_auth_type", "'RequestClientCert'", "RequireAndVerifyClientCert"]),
        ("auth-without-ca", {"tls_server_config": {**tls, "client_auth_type": "RequireAnyClientCert"}},
         ["RequireAnyClientCert needs client_ca_file"]),
        ("ca-without-auth", {"tls_server_config": {**tls, "client_ca_file": crt}},
         ["client_ca_file is set but client_auth_type is NoClientCert"]),
        ("bad-version", {"tls_server_config": {**tls, "min_version": "TLS10"}},
         ["tls_server_config.min_version", "'TLS10'", "TLS12, TLS13"]),
        ("max-below-min", {"tls_server_config": {**tls, "min_version": "TLS13", "max_version": "TLS12"}},
         ["max_version TLS12 is below min_version TLS13"]),
        ("tls-not-mapping", {"tls_server_config": "yes"}, ["tls_server_config: expected a mapping"]),
        ("plain-password", {"basic_auth_users": {"prometheus": "hunter2"}},
         ["basic_auth_users.prometheus", "not a bcrypt hash", "$2b$"]),
        ("md5-hash", {"basic_auth_users": {"prometheus": "$apr1$abc$0123456789abcdefghijkl"}},
         ["basic_auth_users.prometheus", "not a bcrypt hash"]),
        ("users-not-mapping", {"basic_auth_users": ["prometheus"]}, ["basic_auth_users: expected a mapping"]),
        ("colon-user", {"basic_auth_users": {"a:b": HASH}}, ["basic_auth_users.a:b", "cannot contain ':'"]),
    ]  # fmt: skip


def test_load_web_config_errors(tmp_path: Path, certs: dict[str, Path]) -> None:
    for name, data, expected in _bad_cases(certs, tmp_path):
        path = write_config(tmp_path, data, f"{name}.yaml")
        with pytest.raises(ConfigError) as info:
            load_web_config(path)
        message = str(info.value)
        assert message.startswith(f"{path}: "), (name, message)
        for part in expected:
            assert part in message, (name, part, message)
        assert "hunter2" not in message  # a password put where the hash goes is never echoed
        assert "\n" not in message


def test_load_web_config_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.yaml"
    with pytest.raises(ConfigError, match="absent.yaml: web config file not found"):
        load_web_config(path)
    with pytest.raises(ConfigError, match="is a directory"):
        load_web_config(tmp_path)
    assert issubclass(ConfigError, OomwatchError)  # the CLI prints it as one line and exits 2


# --- listen addresses, start and stop ------------------------------------------------------------


@pytest.mark.parametrize(
    ("addr", "expected"),
    [
        (":9797", ("0.0.0.0", 9797)),
        ("127.0.0.1:0", ("127.0.0.1", 0)),
        ("[::1]:9797", ("::1", 9797)),
        ("[::]:9797", ("::", 9797)),
        ("localhost:80", ("localhost", 80)),
        ("node-1.example.com:65535", ("node-1.example.com", 65535)),
    ],
)
def test_parse_listen(addr: str, expected: tuple[str, int]) -> None:
    assert parse_listen(addr) == expected


@pytest.mark.parametrize(
    ("addr", "message"),
    [
        ("9797", "expected HOST:PORT"),
        ("", "expected HOST:PORT"),
        ("localhost", "expected HOST:PORT"),
        ("localhost:", "expected HOST:PORT"),
        ("localhost:http", "expected HOST:PORT"),
        ("localhost:-1", "expected HOST:PORT"),
        ("127.0.0.1:65536", "out of range"),
        ("::1:9797", "in brackets"),
        ("[::1:9797", "expected HOST:PORT"),
        ("[127.0.0.1]:80", "only IPv6 addresses go in brackets"),
        ("http://localhost:80", "expected HOST:PORT"),
    ],
)
def test_parse_listen_rejects(addr: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        parse_listen(addr)
    assert repr(addr) in str(info.value)


def test_stop_frees_the_port(registry: CollectorRegistry) -> None:
    server = MetricsServer(registry, "127.0.0.1:0")
    with pytest.raises(RuntimeError):
        _ = server.address  # not started
    server.stop()  # not started: nothing to do
    server.start()
    with pytest.raises(RuntimeError):
        server.start()
    url, port = server.url, server.address[1]
    assert get(url)[0] == 200
    server.stop()
    server.stop()  # idempotent
    with pytest.raises(OSError):
        get(url)  # nobody listens any more

    again = MetricsServer(registry, f"127.0.0.1:{port}")
    again.start()
    try:
        assert again.address == ("127.0.0.1", port) and get(again.url)[0] == 200
    finally:
        again.stop()
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # the closed connections may be in TIME_WAIT
        sock.bind(("127.0.0.1", port))
        sock.listen()


def test_port_taken_and_bad_address(serve, registry: CollectorRegistry) -> None:
    first = serve()
    port = first.address[1]
    with pytest.raises(ConfigError, match=rf"cannot listen on 127\.0\.0\.1:{port}: .*in use"):
        MetricsServer(registry, f"127.0.0.1:{port}").start()
    with pytest.raises(ConfigError, match=r"cannot listen on 192\.0\.2\.1:0"):  # TEST-NET-1: not ours
        MetricsServer(registry, "192.0.2.1:0").start()
    with pytest.raises(ConfigError, match="expected HOST:PORT"):
        MetricsServer(registry, "nonsense")
    assert get(first.url)[0] == 200


def test_ipv6(serve) -> None:
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback here")
    server = serve(listen="[::1]:0")
    assert server.address[0] == "::1"
    assert server.url.startswith("http://[::1]:")
    assert get(server.url)[0] == 200


def test_a_version_renders_each_scrape_once(registry: CollectorRegistry) -> None:
    """With ``version``, every scrape of one version is served the same bytes (plain, gzip, OpenMetrics);
    a new version renders afresh; a name filter is always rendered."""
    value = Gauge("oomwatch_test_changing", "Changes between scrapes.", registry=registry)
    version = [0]
    server = MetricsServer(registry, "127.0.0.1:0", version=lambda: version[0])
    server.start()
    try:
        value.set(1)
        _, _, first = get(server.url)
        value.set(2)  # not yet a new version: the rendered body is served
        assert get(server.url)[2] == first and b"oomwatch_test_changing 1.0" in first
        _, headers, zipped = get(server.url, headers={"Accept-Encoding": "gzip"})
        assert headers["Content-Encoding"] == "gzip" and gzip.decompress(zipped) == first
        _, headers, om = get(server.url, headers={"Accept": "application/openmetrics-text; version=1.0.0"})
        assert headers["Content-Type"].startswith("application/openmetrics-text") and om.endswith(b"# EOF\n")
        assert b"oomwatch_test_changing 2.0" in get(server.url + "?name[]=oomwatch_test_changing")[2]
        version[0] = 1
        assert b"oomwatch_test_changing 2.0" in get(server.url)[2]
    finally:
        server.stop()
