"""Basic auth against the web config's ``basic_auth_users`` (user: bcrypt hash), as exporter-toolkit checks
it: no library serving Prometheus metrics does this (prometheus_client's server has no auth at all)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import threading
from collections.abc import Mapping

import bcrypt

REALM = "oomwatch"
_AUTH_CACHE_MAX = 1024


class BasicAuth:
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
