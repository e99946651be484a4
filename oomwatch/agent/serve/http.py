"""The agent's metrics endpoint: an HTTP(S) server for Prometheus, with basic auth, configured by a web
config file (``serve.webconfig``: its format and what differs from exporter-toolkit).

The certificate, key and client CA files are read again when they change on disk (a rotated
Kubernetes secret), the web config file itself is not.

Endpoints: ``/metrics`` (``name[]=`` filters, OpenMetrics when asked for in ``Accept``, gzip),
``/`` (a page linking it), ``/-/healthy`` (``OK``, or 503 and why when the agent's sampling has stopped
ticking); all of them behind basic auth when it is configured.

Why not prometheus_client's own server (``start_http_server`` with ``certfile``, ``client_cafile``,
``client_auth_required``): it has no basic auth; it serves the metrics on every path (no ``/-/healthy``,
no 404) and answers HEAD with 405; it wraps the listening socket, so the TLS handshake runs in the
accept loop (one silent client stalls every scrape) and the certificate is never read again; it can
only require a client certificate or not (no ``VerifyClientCertIfGiven``), and trusts the system's CAs
when no client CA is given; it looks up the host's FQDN when it binds (a DNS query); and it renders
every scrape anew. What it does give is used: its encoders and content negotiation.
"""

from __future__ import annotations

import contextlib
import gzip
import re
import socket
import socketserver
import ssl
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder, gzip_accepted

from oomwatch.agent.serve.basicauth import REALM, BasicAuth
from oomwatch.agent.serve.exporter import RenderCache
from oomwatch.agent.serve.webconfig import TLSServerConfig, WebConfig
from oomwatch.errors import ConfigError

__all__ = ["MetricsServer", "parse_listen"]

_LISTEN = re.compile(r"(?:\[(?P<v6>[0-9A-Za-z:.%_-]*)\]|(?P<host>[0-9A-Za-z._-]*)):(?P<port>[0-9]{1,5})")

HANDSHAKE_TIMEOUT_S = 10.0  # a client that connects and says nothing holds a thread this long at most
REQUEST_TIMEOUT_S = 30.0
POLL_INTERVAL_S = 0.2  # how long stop() may wait for the accept loop to notice


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
            auth = BasicAuth(wc.basic_auth_users)
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


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64

    def __init__(
        self,
        address: tuple[str, int],
        family: socket.AddressFamily,
        registry: CollectorRegistry,
        tls: _TLSContexts | None,
        auth: BasicAuth,
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
