"""The web config file, in the format Prometheus exporters read (prometheus/exporter-toolkit,
``docs/web-configuration.md``): TLS and basic auth for the metrics endpoint (``serve.http``)::

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
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from oomwatch.engine.yamlsafe import OversizedFile, load_bounded, read_text_limited
from oomwatch.errors import ConfigError

__all__ = ["TLSServerConfig", "WebConfig", "load_web_config"]

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
    values = _tls_values(path, raw)
    if not values:  # `tls_server_config: {}`: plain HTTP, as with exporter-toolkit
        return None
    for key in ("cert_file", "key_file"):
        if key not in values:
            raise ConfigError(f"{path}: tls_server_config.{key} is missing (needed to serve HTTPS)")
    files = _tls_files(path, values)
    auth = _client_auth(path, values.get("client_auth_type", "NoClientCert"), "client_ca_file" in files)
    min_version, max_version = _tls_versions(path, values)
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


def _tls_values(path: Path, raw: dict[Any, Any]) -> dict[str, str]:
    """The keys of ``tls_server_config`` that are set, checked to be known and strings."""
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
    return values


def _tls_files(path: Path, values: dict[str, str]) -> dict[str, Path]:
    """The certificate, key and client CA files named, relative to the web config file; each must exist."""
    files: dict[str, Path] = {}
    for key in ("cert_file", "key_file", "client_ca_file"):
        if key in values:
            file = path.parent / Path(values[key]).expanduser()
            if not file.is_file():
                problem = "is not a file" if file.exists() else "does not exist"
                raise ConfigError(f"{path}: tls_server_config.{key}: {file} {problem}")
            files[key] = file
    return files


def _client_auth(path: Path, auth: str, has_ca: bool) -> str:
    """``client_auth_type``, checked to be known and to agree with ``client_ca_file``."""
    if auth not in CLIENT_AUTH_TYPES:
        raise ConfigError(
            f"{path}: tls_server_config.client_auth_type: unknown value {auth!r} "
            f"(allowed: {', '.join(CLIENT_AUTH_TYPES)})"
        )
    if auth == "NoClientCert" and has_ca:
        raise ConfigError(
            f"{path}: tls_server_config.client_ca_file is set but client_auth_type is NoClientCert; "
            "set client_auth_type to RequireAndVerifyClientCert or VerifyClientCertIfGiven"
        )
    if auth != "NoClientCert" and not has_ca:
        raise ConfigError(f"{path}: tls_server_config.client_auth_type {auth} needs client_ca_file")
    return auth


def _tls_versions(path: Path, values: dict[str, str]) -> tuple[str, str | None]:
    """(``min_version``, ``max_version``), checked to be known and in order."""
    for key in ("min_version", "max_version"):
        if key in values and values[key] not in TLS_VERSIONS:
            raise ConfigError(
                f"{path}: tls_server_config.{key}: unknown value {values[key]!r} (allowed: {', '.join(TLS_VERSIONS)})"
            )
    min_version = values.get("min_version", "TLS12")
    max_version = values.get("max_version")
    if max_version is not None and TLS_VERSIONS[max_version] < TLS_VERSIONS[min_version]:
        raise ConfigError(f"{path}: tls_server_config.max_version {max_version} is below min_version {min_version}")
    return min_version, max_version


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
