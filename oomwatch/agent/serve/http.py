"""The agent's metrics endpoint: an HTTP(S) server for Prometheus, with basic auth.

TLS and basic auth come from a *web config file* in the format Prometheus exporters read
(prometheus/exporter-toolkit, ``docs/web-configuration.md``)::

    tls_server_config:
      cert_file: server.crt            # relative paths are relative to the web config file
      key_file: server.key
      client_ca_file: ca.crt           # optional: CAs that sign client certificates
      client_auth_type: RequireAndVerifyClientCert
      min_version: TLS12               # TLS12 (default) or TLS13; max_version likewise, optional
    basic_auth_users:
      prometheus: $2b$10$...           # user: bcrypt hash of the password
    http_server_config: {}             # accepted and ignored

Differences from exporter-toolkit: ``RequireAnyClientCert`` verifies the certificate like
``RequireAndVerifyClientCert`` (Python's ``ssl`` cannot ask for a certificate without verifying it),
``RequestClientCert``, ``cipher_suites``, ``curve_preferences``, ``client_allowed_sans`` and inline
``cert``/``key``/``client_ca`` are refused rather than half-honoured; ``prefer_server_cipher_suites``
is accepted and ignored (Go ignores it too). The certificate, key and client CA files are read again
when they change on disk (a rotated Kubernetes secret), the web config file itself is not.

Endpoints: ``/metrics`` (``name[]=`` filters, OpenMetrics when asked for in ``Accept``, gzip),
``/`` (a page linking it), ``/-/healthy`` (``OK``, or 503 and why when the agent's sampling has stopped
ticking); all of them behind basic auth when it is configured.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import gzip
import hashlib
import re
import socket
import socketserver
import ssl
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import MappingProxyType
from typing import Any
from urllib.parse import parse_qs, urlsplit

import bcrypt
import yaml
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder, gzip_accepted

from oomwatch.agent.serve.exporter import RenderCache
from oomwatch.engine.yamlsafe import OversizedFile, load_bounded, read_text_limited
from oomwatch.errors import ConfigError

__all__ = ["MetricsServer", "TLSServerConfig", "WebConfig", "load_web_config", "parse_listen"]

CLIENT_AUTH_TYPES: Mapping[str, ssl.VerifyMode] = MappingProxyType(
    {
        "NoClientCert": ssl.CERT_NONE,
        "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
        "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
        "RequireAnyClientCert": ssl.CERT_REQUIRED,  # verified all the same: see the module docstring
    }
)
TLS_VERSIONS: Mapping[str, ssl.TLSVersion] = MappingProxyType(
    {"TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}
)
REALM = "oomwatch"
MAX_WEB_CONFIG_BYTES = 1 << 20  # users and file names: kilobytes

_TOP_KEYS = ("tls_server_config", "basic_auth_users", "http_server_config")
_TLS_KEYS = ("cert_file", "key_file", "client_ca_file", "client_auth_type", "min_version", "max_version")
_TLS_IGNORED = ("prefer_server_cipher_suites",)
_TLS_UNSUPPORTED = ("cert", "key", "client_ca", "cipher_suites", "curve_preferences", "client_allowed_sans")
_BCRYPT = re.compile(r"\$2[aby]\$(0[4-9]|[12][0-9]|3[01])\$[./A-Za-z0-9]{53}")
_BCRYPT_HINT = (
    "expected a bcrypt hash starting with $2a$, $2b$ or $2y$; make one with `htpasswd -nBC 10 USER` "
    "(the part after the colon) or `python -c 'import bcrypt, getpass; "
    "print(bcrypt.hashpw(getpass.getpass().encode(), bcrypt.gensalt()).decode())'`"
)
_LISTEN = re.compile(r"(?:\[(?P<v6>[0-9A-Za-z:.%_-]*)\]|(?P<host>[0-9A-Za-z._-]*)):(?P<port>[0-9]{1,5})")

HANDSHAKE_TIMEOUT_S = 10.0  # a client that connects and says nothing holds a thread this long at most
REQUEST_TIMEOUT_S = 30.0
POLL_INTERVAL_S = 0.2  # how long stop() may wait for the accept loop to notice
_AUTH_CACHE_MAX = 1024


@dataclass(frozen=True)
class TLSServerConfig:
    """``tls_server_config``: paths are absolute (resolved against the web config file's directory)."""

    cert_file: Path
    key_file: Path
    client_ca_file: Path | None = None
    client_auth_type: str = "NoClientCert"
    min_version: str = "TLS12"
    max_version: str | None = None

    def ssl_context(self) -> ssl.SSLContext:
        """A server context from the files as they are now; :class:`ConfigError` if ``ssl`` refuses them."""
        if self.client_auth_type not in CLIENT_AUTH_TYPES:
            raise ConfigError(
                f"tls_server_config.client_auth_type: unknown value {self.client_auth_type!r} "
                f"(allowed: {', '.join(CLIENT_AUTH_TYPES)})"
            )
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = TLS_VERSIONS[self.min_version]
        if self.max_version is not None:
            ctx.maximum_version = TLS_VERSIONS[self.max_version]

        def no_passphrase() -> bytes:
            raise ConfigError(
                f"tls_server_config.key_file: {self.key_file} is encrypted; oomwatch needs a key without a passphrase"
            )

        try:
            ctx.load_cert_chain(self.cert_file, self.key_file, password=no_passphrase)
        except (ssl.SSLError, OSError) as exc:
            raise ConfigError(
                f"tls_server_config: cannot load cert_file {self.cert_file} with key_file {self.key_file}: "
                f"{_ssl_reason(exc)} (both must be PEM, and the key must belong to the certificate)"
            ) from exc
        ctx.verify_mode = CLIENT_AUTH_TYPES[self.client_auth_type]
        if self.client_ca_file is not None:
            try:
                ctx.load_verify_locations(cafile=self.client_ca_file)
            except (ssl.SSLError, OSError) as exc:
                raise ConfigError(
                    f"tls_server_config.client_ca_file: cannot load {self.client_ca_file}: {_ssl_reason(exc)} "
                    "(expected PEM certificates)"
                ) from exc
        return ctx

    def files(self) -> tuple[Path, ...]:
        return (self.cert_file, self.key_file) + ((self.client_ca_file,) if self.client_ca_file else ())


@dataclass(frozen=True)
class WebConfig:
    """A parsed, validated web config file. ``WebConfig()`` is plain HTTP without auth."""

    tls: TLSServerConfig | None = None
    basic_auth_users: Mapping[str, str] = field(default_factory=dict, repr=False)  # user -> bcrypt hash
    path: Path | None = None  # the file it was read from, if any


def load_web_config(path: Path) -> WebConfig:
    """Read and check a web config file; every problem is a :class:`ConfigError` naming the file and key."""
    try:
        text = read_text_limited(path, MAX_WEB_CONFIG_BYTES)
    except FileNotFoundError:
        raise ConfigError(f"{path}: web config file not found") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: web config file is a directory") from None
    except (OSError, UnicodeDecodeError, OversizedFile) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(f"{path}: cannot read web config file: {reason}") from None
    try:
        data = load_bounded(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {_yaml_reason(exc)}") from None
    except RecursionError:
        raise ConfigError(f"{path}: not valid YAML: nested too deep") from None
    if data is None:  # an empty file: exporter-toolkit serves plain HTTP without auth
        return WebConfig(path=path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping with keys {', '.join(_TOP_KEYS)}, got {_kind(data)}")
    for key in data:
        if key not in _TOP_KEYS:
            raise ConfigError(f"{path}: unknown key {str(key)!r} (allowed: {', '.join(_TOP_KEYS)})")
    tls = _load_tls(path, data.get("tls_server_config"))
    users = _load_users(path, data.get("basic_auth_users"))
    return WebConfig(tls=tls, basic_auth_users=users, path=path)


def _load_tls(path: Path, raw: object) -> TLSServerConfig | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: tls_server_config: expected a mapping, got {_kind(raw)}")
    values: dict[str, str] = {}
    for key, value in raw.items():
        name = f"tls_server_config.{key}"
        if key in _TLS_UNSUPPORTED:
            raise ConfigError(f"{path}: {name} is not supported by oomwatch")
        if key in _TLS_IGNORED:
            continue
        if key not in _TLS_KEYS:
            raise ConfigError(f"{path}: unknown key {name!r} (allowed: {', '.join(_TLS_KEYS + _TLS_IGNORED)})")
        if value is None or value == "":
            continue
        if not isinstance(value, str):
            raise ConfigError(f"{path}: {name}: expected a string, got {_kind(value)}")
        values[key] = value
    if not values:  # `tls_server_config: {}`: plain HTTP, as with exporter-toolkit
        return None
    for key in ("cert_file", "key_file"):
        if key not in values:
            raise ConfigError(f"{path}: tls_server_config.{key} is missing (needed to serve HTTPS)")
    files: dict[str, Path] = {}
    for key in ("cert_file", "key_file", "client_ca_file"):
        if key in values:
            file = path.parent / Path(values[key]).expanduser()
            if not file.is_file():
                problem = "is not a file" if file.exists() else "does not exist"
                raise ConfigError(f"{path}: tls_server_config.{key}: {file} {problem}")
            files[key] = file
    auth = values.get("client_auth_type", "NoClientCert")
    if auth not in CLIENT_AUTH_TYPES:
        raise ConfigError(
            f"{path}: tls_server_config.client_auth_type: unknown value {auth!r} "
            f"(allowed: {', '.join(CLIENT_AUTH_TYPES)})"
        )
    has_ca = "client_ca_file" in files
    if auth == "NoClientCert" and has_ca:
        raise ConfigError(
            f"{path}: tls_server_config.client_ca_file is set but client_auth_type is NoClientCert; "
            "set client_auth_type to RequireAndVerifyClientCert or VerifyClientCertIfGiven"
        )
    if auth != "NoClientCert" and not has_ca:
        raise ConfigError(f"{path}: tls_server_config.client_auth_type {auth} needs client_ca_file")
    for key in ("min_version", "max_version"):
        if key in values and values[key] not in TLS_VERSIONS:
            raise ConfigError(
                f"{path}: tls_server_config.{key}: unknown value {values[key]!r} (allowed: {', '.join(TLS_VERSIONS)})"
            )
    min_version = values.get("min_version", "TLS12")
    max_version = values.get("max_version")
    if max_version is not None and TLS_VERSIONS[max_version] < TLS_VERSIONS[min_version]:
        raise ConfigError(f"{path}: tls_server_config.max_version {max_version} is below min_version {min_version}")
    tls = TLSServerConfig(
        cert_file=files["cert_file"],
        key_file=files["key_file"],
        client_ca_file=files.get("client_ca_file"),
        client_auth_type=auth,
        min_version=min_version,
        max_version=max_version,
    )
    try:
        tls.ssl_context()
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    return tls


def _load_users(path: Path, raw: object) -> Mapping[str, str]:
    if raw is None:
        return MappingProxyType({})
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: basic_auth_users: expected a mapping of user to bcrypt hash, got {_kind(raw)}")
    users: dict[str, str] = {}
    for user, hashed in raw.items():
        if isinstance(user, int) and not isinstance(user, bool):
            user = str(user)  # `1234: $2b$...`: YAML reads the name as a number
        if not isinstance(user, str) or not user:
            raise ConfigError(f"{path}: basic_auth_users: user names must be non-empty strings, got {user!r}")
        if ":" in user:
            raise ConfigError(f"{path}: basic_auth_users.{user}: a user name cannot contain ':' (basic auth)")
        # never echo the value: a plain-text password put there by mistake must not land in a log
        if not isinstance(hashed, str) or not _BCRYPT.fullmatch(hashed):
            raise ConfigError(f"{path}: basic_auth_users.{user}: not a bcrypt hash ({_BCRYPT_HINT})")
        users[user] = hashed
    return MappingProxyType(users)


def parse_listen(addr: str) -> tuple[str, int]:
    """``host:port`` to ``(host, port)``: ``:9797`` is every IPv4 address, IPv6 hosts go in brackets."""
    m = _LISTEN.fullmatch(addr.strip())
    if m is None:
        hint = " (put an IPv6 address in brackets: [::1]:9797)" if addr.count(":") > 1 else ""
        raise ConfigError(f"listen address {addr!r}: expected HOST:PORT, :PORT or [IPV6]:PORT{hint}")
    port = int(m["port"])
    if port > 65535:
        raise ConfigError(f"listen address {addr!r}: port {port} is out of range (0-65535)")
    if m["v6"] is not None:
        host = m["v6"]
        if ":" not in host:
            raise ConfigError(f"listen address {addr!r}: only IPv6 addresses go in brackets")
        return host, port
    return (m["host"] or "0.0.0.0"), port


class MetricsServer:
    """Serves ``registry`` on ``listen`` from a daemon thread, over HTTPS and with basic auth per ``web_config``."""

    def __init__(
        self,
        registry: CollectorRegistry,
        listen: str,
        web_config: WebConfig | None = None,
        health: Callable[[], str | None] | None = None,
        version: Callable[[], object] | None = None,
    ) -> None:
        self._registry = registry
        # what changes with what the registry shows: a whole scrape is then rendered once per version
        self._cache = RenderCache(registry, version) if version is not None else None
        self._health = health  # None when healthy, else what is wrong (``/-/healthy`` answers 503 with it)
        self._listen = listen
        self._host, self._port = parse_listen(listen)
        self._web_config = web_config or WebConfig()
        self._lock = threading.Lock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._address: tuple[str, int] | None = None

    def start(self) -> None:
        """Bind and serve; :class:`ConfigError` if the address cannot be bound or the TLS files cannot be loaded."""
        with self._lock:
            if self._server is not None:
                raise RuntimeError("MetricsServer.start: already started")
            wc = self._web_config
            tls = _TLSContexts(wc.tls) if wc.tls is not None else None
            auth = _BasicAuth(wc.basic_auth_users)
            family = socket.AF_INET6 if ":" in self._host else socket.AF_INET
            try:
                server = _Server((self._host, self._port), family, self._registry, tls, auth, self._health, self._cache)
            except OSError as exc:
                reason = exc.strerror or str(exc)
                raise ConfigError(f"cannot listen on {self._listen}: {reason}") from None
            host, port = server.server_address[:2]
            self._address = (str(host), int(port))
            thread = threading.Thread(
                target=server.serve_forever,
                kwargs={"poll_interval": POLL_INTERVAL_S},
                name=f"oomwatch-metrics-{port}",
                daemon=True,
            )
            thread.start()
            self._server, self._thread = server, thread

    @property
    def address(self) -> tuple[str, int]:
        """The bound host and port (port 0 resolved); the last one after :meth:`stop`."""
        if self._address is None:
            raise RuntimeError("MetricsServer.address: not started")
        return self._address

    @property
    def url(self) -> str:
        host, port = self.address
        scheme = "https" if self._web_config.tls is not None else "http"
        return f"{scheme}://{f'[{host}]' if ':' in host else host}:{port}/metrics"

    def stop(self) -> None:
        """Stop accepting, close the socket, join the thread; does nothing when not running."""
        with self._lock:
            server, thread = self._server, self._thread
            self._server = self._thread = None
        if server is None or thread is None:
            return
        server.shutdown()
        server.server_close()
        thread.join()


class _TLSContexts:
    """The current ``SSLContext``, rebuilt when the certificate, key or CA files change on disk."""

    def __init__(self, config: TLSServerConfig) -> None:
        self._config = config
        self._lock = threading.Lock()
        self._stamp = self._stamp_now()
        self._ctx = config.ssl_context()

    def _stamp_now(self) -> tuple[tuple[int, int, int], ...] | None:
        try:
            return tuple((s.st_mtime_ns, s.st_size, s.st_ino) for s in (f.stat() for f in self._config.files()))
        except OSError:
            return None  # mid-rotation: keep what we have

    def get(self) -> ssl.SSLContext:
        stamp = self._stamp_now()
        with self._lock:
            if stamp is not None and stamp != self._stamp:
                try:
                    self._ctx = self._config.ssl_context()
                    self._stamp = stamp
                except ConfigError:
                    pass  # half-written files: serve with the old pair, try again on the next connection
            return self._ctx


class _BasicAuth:
    """bcrypt checks, with good ``(user, password)`` pairs remembered by a hash (bcrypt is slow on purpose)."""

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = {user: hashed.encode() for user, hashed in users.items()}
        self._good: set[bytes] = set()
        self._lock = threading.Lock()
        self._dummy = b""
        if self._users:  # unknown users cost a bcrypt check too, so that timing does not tell who exists
            cost = max(int(hashed[4:6]) for hashed in self._users.values())
            self._dummy = bcrypt.hashpw(b"not a password", bcrypt.gensalt(rounds=cost))

    def check(self, header: str | None) -> bool:
        if not self._users:
            return True
        if not header:
            return False
        scheme, _, token = header.strip().partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            raw = base64.b64decode(token.strip(), validate=True)
            user_bytes, sep, password = raw.partition(b":")
            user = user_bytes.decode("utf-8")
        except (binascii.Error, ValueError):
            return False
        if not sep:
            return False
        hashed = self._users.get(user)
        key = hashlib.sha256(b"".join(len(p).to_bytes(4, "big") + p for p in (user_bytes, hashed or b"", password)))
        digest = key.digest()
        with self._lock:
            if hashed is not None and digest in self._good:
                return True
        # bcrypt reads 72 bytes at most (as Go's does); the Python binding refuses longer ones instead
        ok = bcrypt.checkpw(password[:72], hashed if hashed is not None else self._dummy) and hashed is not None
        if ok:
            with self._lock:
                if len(self._good) >= _AUTH_CACHE_MAX:
                    self._good.clear()
                self._good.add(digest)
        return ok


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64

    def __init__(
        self,
        address: tuple[str, int],
        family: socket.AddressFamily,
        registry: CollectorRegistry,
        tls: _TLSContexts | None,
        auth: _BasicAuth,
        health: Callable[[], str | None] | None = None,
        cache: RenderCache | None = None,
    ) -> None:
        self.address_family = family
        self.registry = registry
        self.cache = cache
        self.health = health
        self.tls = tls
        self.auth = auth
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind would look up the host's FQDN (a DNS query, slow where DNS is broken)
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)

    def finish_request(self, request: Any, client_address: Any) -> None:
        if self.tls is None:
            super().finish_request(request, client_address)
            return
        # in the connection's thread, so that a slow or broken client never holds up accept()
        try:
            request.settimeout(HANDSHAKE_TIMEOUT_S)
            first = request.recv(1, socket.MSG_PEEK)
            if not first:
                return
            if first != b"\x16":  # not a TLS handshake record: most likely plain HTTP
                _refuse_plain_http(request)
                return
            conn = self.tls.get().wrap_socket(request, server_side=True, do_handshake_on_connect=False)
        except OSError:
            return
        try:
            conn.do_handshake()
            _Handler(conn, client_address, self)
        except OSError:  # failed handshakes (ssl.SSLError), resets, timeouts: that client's problem only
            pass
        finally:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_WR)
            conn.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], OSError):  # a client that went away is no news
            super().handle_error(request, client_address)


def _refuse_plain_http(sock: socket.socket) -> None:
    body = b"Client sent an HTTP request to an HTTPS server.\n"
    sock.recv(65536)  # the request, so that closing does not reset the connection before the reply arrives
    sock.sendall(
        b"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )


_INDEX = (
    b"<!doctype html>\n<html><head><title>oomwatch agent</title></head>\n"
    b'<body><h1>oomwatch agent</h1><p><a href="metrics">Metrics</a></p></body></html>\n'
)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "oomwatch"
    sys_version = ""
    timeout = REQUEST_TIMEOUT_S

    def log_message(self, format: str, *args: Any) -> None:
        pass  # Prometheus scrapes every few seconds: no line per request

    def do_GET(self) -> None:
        self._serve(with_body=True)

    def do_HEAD(self) -> None:
        self._serve(with_body=False)

    def _serve(self, with_body: bool) -> None:
        if not self.server.auth.check(self.headers.get("Authorization")):
            self._reply(
                401, b"Unauthorized\n", "text/plain; charset=utf-8", with_body,
                [("WWW-Authenticate", f'Basic realm="{REALM}"')],
            )  # fmt: skip
            return
        url = urlsplit(self.path)
        if url.path == "/metrics":
            self._metrics(url.query, with_body)
        elif url.path == "/":
            self._reply(200, _INDEX, "text/html; charset=utf-8", with_body)
        elif url.path == "/-/healthy":
            problem = self.server.health() if self.server.health is not None else None
            if problem is None:
                self._reply(200, b"OK\n", "text/plain; charset=utf-8", with_body)
            else:
                self._reply(503, f"unhealthy: {problem}\n".encode(), "text/plain; charset=utf-8", with_body)
        else:
            self._reply(404, b"Not Found\n", "text/plain; charset=utf-8", with_body)

    def _metrics(self, query: str, with_body: bool) -> None:
        registry: Any = self.server.registry
        names = parse_qs(query).get("name[]")
        if names:
            registry = registry.restricted_registry(names)
        encoder, content_type = choose_encoder(self.headers.get("Accept") or "")
        gzipped = gzip_accepted(self.headers.get("Accept-Encoding") or "")
        cache = self.server.cache
        try:
            if cache is not None and not names:
                output = cache.get(encoder, gzipped)
            else:
                output = encoder(registry)
                if gzipped:
                    output = gzip.compress(output, compresslevel=6)
        except Exception as exc:  # a collector's bug: the scrape fails, the server stays up
            self._reply(500, f"error collecting metrics: {exc!r}\n".encode(), "text/plain; charset=utf-8", with_body)
            return
        headers = [("Vary", "Accept-Encoding")]
        if gzipped:
            headers.append(("Content-Encoding", "gzip"))
        self._reply(200, output, content_type, with_body, headers)

    def _reply(
        self, status: int, body: bytes, content_type: str, with_body: bool, headers: list[tuple[str, str]] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers or ():
            self.send_header(name, value)
        self.end_headers()
        if with_body:
            self.wfile.write(body)


def _ssl_reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return str(exc.reason).replace("_", " ").lower()
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)


def _yaml_reason(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        return f"line {mark.line + 1}, column {mark.column + 1}: {exc.problem}"
    return " ".join(str(exc).split())


def _kind(value: object) -> str:
    kinds = {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean"}
    return kinds.get(type(value), type(value).__name__)
