"""Things the agent cannot see, said once each: a missing file on an old kernel, no PSI, no
permission to read other users' smaps. Normal conditions, not errors: they are logged once and
listed in ``oomwatch top`` and the agent's metrics, never repeated every tick."""

from __future__ import annotations

import logging

log = logging.getLogger("oomwatch.agent")


class Notices:
    def __init__(self) -> None:
        self._said: dict[str, str] = {}
        self._new: list[str] = []

    def say(self, key: str, message: str) -> None:
        if key in self._said:
            return
        self._said[key] = message
        self._new.append(message)
        log.warning("%s", message)

    def drain(self) -> tuple[str, ...]:
        """The notices said since the last drain."""
        new, self._new = tuple(self._new), []
        return new

    @property
    def all(self) -> tuple[str, ...]:
        return tuple(self._said.values())
