"""The incidents' ledger: each kill taken on once (by its kill id, also across restarts), counted and exported
at once under provisional labels, settled when diagnosed, and its files written atomically; a disk that
refuses them keeps them queued and tried again (``flush``). The base of
:class:`~oomwatch.agent.incidents.writer.Incidents`, which holds the lock it shares."""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oomwatch.agent.atomic import write_atomic
from oomwatch.agent.incidents.listing import incident_dir, list_incidents
from oomwatch.agent.tick import ProcessSample

log = logging.getLogger("oomwatch.agent")

RECENT_KEPT = 100  # incidents kept for oomwatch_incident_timestamp_seconds...
RECENT_SECONDS = 3600.0  # ...for an hour: also those written before a restart, read back from disk
NO_REMEDY = "Cause not determined: the incident lists the candidates and what to collect (oomwatch incidents show)."
RETRY_SECONDS = 5.0  # how often an incident that could not be written is tried again
PENDING_REMEDY = "The incident is being written (oomwatch incidents show, in a moment)."
# a kernel OOM report for a pid whose SIGKILL incident (no report had come) was taken on this long ago or
# less replaces that incident: the report came late (journald on a loaded node), and it is one kill
REPLACE_SECONDS = 120.0
_SLUG = re.compile(r"[^A-Za-z0-9._-]+")


class Ledger:
    """Which kills were taken on, their counts and recent incidents, and the files the disk refused."""

    lock: threading.Lock  # the incidents' one lock (created by Incidents)

    def __init__(self, state_dir: Path) -> None:
        self.dir = incident_dir(state_dir)
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # kills are still counted; their files are written when the disk allows
            log.error("cannot create %s (%s): incidents are counted and written when it can be", self.dir, exc)
        # (job, role, rank, comm, verdict, cause) -> incidents
        self.counts: dict[tuple[str, str, str, str, str, str], int] = {}
        # the latest incidents, newest last: (time, job, role, rank, comm, verdict, cause, remedy, id)
        self.recent: deque[tuple[float, str, str, str, str, str, str, str, str]] = deque(maxlen=RECENT_KEPT)
        # kill id -> the id of its incident, written or being written: each kill is written once
        self._kills: dict[str, str] = {}
        # pid -> its SIGKILL incident's id, kill id and when taken on, for REPLACE_SECONDS
        self._sigkilled: dict[int, tuple[str, str, float]] = {}
        self._labels: dict[str, tuple[str, str, str, str, str, str]] = {}  # their incident id -> counted labels
        self._superseded: set[str] = set()  # kill ids whose incident a later report took over
        self._write_lock = threading.Lock()  # whether it was taken over checked and its files written, in one go
        self._load_recent(state_dir)
        self._unwritten: deque[_Unwritten] = deque()  # incidents the disk refused: tried again
        self._retry_at = 0.0
        self.write_errors = 0  # failed attempts to write an incident file (oomwatch_incident_write_errors_total)
        self.last_time: float | None = None

    def _load_recent(self, state_dir: Path) -> None:
        """The last hour's incidents from disk: an agent restarted after a kill still exports them."""
        since = time.time() - RECENT_SECONDS
        for doc in list_incidents(state_dir):
            if isinstance(doc.get("kill_id"), str):
                self._kills[doc["kill_id"]] = str(doc.get("id"))
            try:
                if float(doc["time"]) < since:
                    continue
                v, diagnosis = doc["victim"], doc["diagnosis"]
                cause, remedy = alert_cause(diagnosis)
                rank = "" if v.get("rank") is None else str(v["rank"])
                self.recent.append((float(doc["time"]), v.get("job") or "", v.get("role") or "unknown", rank,
                                    v.get("comm") or "", diagnosis.get("verdict") or "", cause, remedy,
                                    str(doc["id"])))  # fmt: skip
            except (KeyError, TypeError, ValueError, AttributeError):
                continue  # a file of another shape: listed by `oomwatch incidents`, not exported
        # list_incidents is sorted by file name, which starts with the UTC time: oldest first

    def _claim(
        self,
        kill_id: str,
        now: float,
        pid: int,
        victim: ProcessSample | None,
        job: str | None,
        comm: str,
        verdict: str,
        *,
        sigkill: bool = False,
        report: bool = False,
    ) -> Pending | Path:
        """Take a kill on: counted and exported at once (its verdict from its kind, its cause not yet
        known) before anything is diagnosed or written; a kill taken on before gives its file's path.
        ``sigkill``: a SIGKILL that no OOM report explained (yet); ``report``: the kernel's OOM report,
        which takes over the pid's SIGKILL incident of the last REPLACE_SECONDS (same file, counted
        once) instead of making a second incident of one kill."""
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
        ident = f"{stamp}-{_SLUG.sub('_', job or 'node')[:60]}-{pid}"
        role = victim.role if victim is not None else "unknown"
        rank = "" if victim is None or victim.rank is None else str(victim.rank)
        key = (job or "", role, rank, comm, verdict, "unknown")
        with self.lock:
            known = self._kills.get(kill_id)
            if known is not None:
                log.info("pid %d: the incident of this kill (%s) is %s already; not written again", pid, kill_id, known)
                return self.dir / f"{known}.json"
            for gone in [p for p, (_, _, t) in self._sigkilled.items() if now - t > REPLACE_SECONDS]:
                self._labels.pop(self._sigkilled.pop(gone)[0], None)
            earlier = self._sigkilled.pop(pid, None) if report else None
            replaces = None
            if earlier is not None:
                ident, replaces, _ = earlier
                self._superseded.add(replaces)
                self._uncount(ident)
                log.warning("pid %d: the kernel's OOM report came after its SIGKILL incident %s: it replaces it",
                            pid, ident)  # fmt: skip
            else:
                taken = set(self._kills.values())
                base, n = ident, 1
                while ident in taken or (self.dir / f"{ident}.json").exists():
                    n += 1  # another kill of this pid (or job) in the same second: a file of its own
                    ident = f"{base}-{n}"
            self._kills[kill_id] = ident
            if sigkill:
                self._sigkilled[pid] = (ident, kill_id, now)
                self._labels[ident] = key
            self.counts[key] = self.counts.get(key, 0) + 1
            self.recent.append((now, *key, PENDING_REMEDY, ident))
            self.last_time = now
        return Pending(kill_id, ident, now, pid, key, replaces)

    def _uncount(self, ident: str) -> None:
        """The incident ``ident`` no longer counted (it is replaced); under the lock."""
        labels = self._labels.pop(ident, None)
        if labels is not None:
            self._count_down(labels)
        entries = [e for e in self.recent if e[-1] != ident]
        self.recent.clear()
        self.recent.extend(entries)

    def _count_down(self, labels: tuple[str, str, str, str, str, str]) -> None:
        left = self.counts.get(labels, 0) - 1
        if left > 0:
            self.counts[labels] = left
        else:
            self.counts.pop(labels, None)

    def _settle(self, pending: Pending, key: tuple[str, str, str, str, str, str], remedy: str) -> None:
        """The kill's labels, now that it is diagnosed: its count moves from the provisional ones."""
        with self.lock:
            if pending.kill_id in self._superseded:
                return  # replaced meanwhile: the report's incident is counted instead
            if pending.ident in self._labels:  # a SIGKILL incident a report may still replace
                self._labels[pending.ident] = key
            self._count_down(pending.key)
            self.counts[key] = self.counts.get(key, 0) + 1
            entries = list(self.recent)
            self.recent.clear()
            self.recent.extend(
                (pending.time, *key, remedy, pending.ident) if e[-1] == pending.ident else e for e in entries
            )

    def _store(self, pending: Pending, doc: dict[str, Any], text: str) -> Path | None:
        """Write the incident's files; when the disk refuses (full, read-only, permission), keep them to
        try again (see :meth:`flush`) and say so."""
        item = _Unwritten(pending.ident, json.dumps(doc, indent=2) + "\n", text, pending.kill_id)
        try:
            return self._put(item)
        except OSError as exc:
            with self.lock:
                self.write_errors += 1
                self._unwritten.append(item)
                self._retry_at = time.monotonic() + RETRY_SECONDS
                waiting = len(self._unwritten)
            log.error("cannot write the incident %s in %s (%s): %d waiting, trying again every %gs",
                      pending.ident, self.dir, exc.strerror or exc, waiting, RETRY_SECONDS)  # fmt: skip
            return None

    def _put(self, item: _Unwritten) -> Path:
        path = self.dir / f"{item.ident}.json"
        with self._write_lock:
            with self.lock:
                replaced = item.kill_id in self._superseded
            if replaced:  # a later report took this incident over: its files are the report's
                log.info("incident %s: not written for %s, which a later report replaced", item.ident, item.kill_id)
                return path
            self.dir.mkdir(parents=True, exist_ok=True)
            write_atomic(self.dir / f"{item.ident}.txt", item.text)
            write_atomic(path, item.json)  # last: an incident is on disk once its JSON is (its kill_id is in it)
        return path

    def flush(self, force: bool = False) -> list[Path]:
        """Try again to write the incidents the disk refused (every RETRY_SECONDS, or now with
        ``force``); returns the paths written. Called on each tick."""
        with self.lock:
            if not self._unwritten or (not force and time.monotonic() < self._retry_at):
                return []
            waiting = list(self._unwritten)
        written: list[Path] = []
        for item in waiting:
            with self.lock:
                if item.kill_id in self._superseded:  # a later report took it over, and writes its own
                    self._unwritten.remove(item)
                    continue
            try:
                written.append(self._put(item))
            except OSError as exc:
                with self.lock:
                    self.write_errors += 1
                    self._retry_at = time.monotonic() + RETRY_SECONDS
                log.debug("incident %s still not written: %s", item.ident, exc)
                break
            with self.lock:
                self._unwritten.remove(item)
            log.warning("incident %s written (it could not be when the kill was seen)", item.ident)
        return written

    @property
    def unwritten(self) -> int:
        """Incidents counted but not yet on disk."""
        with self.lock:
            return len(self._unwritten)

    def durable(self) -> bool:
        """Whether every kill taken on is on disk: a watcher saves its position only then (a restart
        reads again what is not, and the kill ids keep what is from being written twice)."""
        return self.unwritten == 0


def alert_cause(diagnosis: dict[str, Any]) -> tuple[str, str]:
    """(cause id, one-line remedy) an alert carries: the top cause when it is determined, else
    ``unknown`` and a remedy that says so (never a fix the evidence does not support)."""
    top = (diagnosis.get("causes") or [{}])[0]
    if not diagnosis.get("cause_determined", True) or not top.get("id") or top.get("id") == "unknown":
        return "unknown", NO_REMEDY
    return str(top["id"]), str(top.get("remedy") or NO_REMEDY)


@dataclass(frozen=True)
class Pending:
    """A kill taken on: what it is, the incident it gets, and the labels it is counted under so far."""

    kill_id: str
    ident: str
    time: float
    pid: int
    key: tuple[str, str, str, str, str, str]
    replaces: str | None = None  # the kill id of the SIGKILL incident this report takes over


@dataclass(frozen=True)
class _Unwritten:
    """An incident's files, rendered, that the disk refused."""

    ident: str
    json: str
    text: str
    kill_id: str
