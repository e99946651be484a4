#!/usr/bin/env python3
"""Capture a real kernel OOM kill (and the killed program's output) as a test fixture.

Creates a child of this process's cgroup-v1 memory cgroup, runs COMMAND inside it (a tiny
wrapper writes its own pid into ``cgroup.procs`` and then execs COMMAND, so the whole process
tree it starts is confined), waits, and then extracts from ``/dev/kmsg`` the OOM-killer
reports that name the child cgroup.  The same kernel records are saved the ways users paste
them (raw ``/dev/kmsg`` records, ``dmesg``, ``dmesg -T``, ``dmesg --time-format iso``,
``dmesg -x``; ``journalctl -k`` when journald holds them), next to the command's combined
stdout/stderr, a ``capture.json`` of facts and a ``HOW.md`` note.

The cgroup is always removed (leftover processes in it, which this tool started, are
SIGKILLed first).  Needs root and a cgroup-v1 memory controller.  Stdlib only.

Usage (from the repository root):

    sudo python3 tools/capture/kernel_oom.py --limit 200M \
        --out tests/fixtures/captured/memcg_python_hog -- python3 tools/capture/workloads/hog.py
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import errno
import json
import os
import platform
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

from oomwatch.procfs.kmsg import unescape

KMSG = "/dev/kmsg"

# Executed by a fresh interpreter: move itself into the cgroup, then become COMMAND.
_WRAPPER = (
    "import os, sys\n"
    "with open(sys.argv[1], 'w') as f:\n"
    "    f.write(str(os.getpid()))\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)


# --------------------------------------------------------------------------- cgroup discovery


def _self_memory_cgroup() -> str:
    """The memory cgroup path of this process (relative to the v1 hierarchy root)."""
    with open("/proc/self/cgroup") as f:
        for line in f:
            parts = line.rstrip("\n").split(":", 2)
            if len(parts) == 3 and "memory" in parts[1].split(","):
                return parts[2]
    raise SystemExit(
        "no cgroup-v1 'memory' controller line in /proc/self/cgroup "
        "(cgroup v2 only hosts are not supported by this tool)"
    )


def _memory_mount() -> tuple[str, str]:
    """(mount point, mount root) of the cgroup-v1 hierarchy that has the memory controller."""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            pre, _, post = line.rstrip("\n").partition(" - ")
            pre_f, post_f = pre.split(), post.split()
            if len(post_f) >= 3 and post_f[0] == "cgroup" and "memory" in post_f[2].split(","):
                return _unescape_mountinfo(pre_f[4]), _unescape_mountinfo(pre_f[3])
    raise SystemExit("no cgroup-v1 memory hierarchy mounted (see /proc/self/mountinfo)")


def _unescape_mountinfo(s: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), s)


def parent_cgroup() -> tuple[str, str]:
    """(kernel path, filesystem directory) of this process's memory cgroup."""
    path = _self_memory_cgroup()
    mnt, root = _memory_mount()
    rel = path
    if root != "/" and (path == root or path.startswith(root.rstrip("/") + "/")):
        rel = path[len(root.rstrip("/")) :]
    return path, os.path.join(mnt, rel.lstrip("/"))


# --------------------------------------------------------------------------- /dev/kmsg


@dataclass
class Record:
    prefix: int  # syslog prefix: facility * 8 + level
    seq: int
    usec: int
    flags: str
    text: str  # as /dev/kmsg escapes it (non-printables as \xNN)
    raw: bytes = field(repr=False)  # the record exactly as read, dict lines included

    @property
    def level(self) -> int:
        return self.prefix & 7


_KMSG_HEAD = re.compile(rb"^(\d+),(\d+),(\d+),([^,;]*)[^;]*;")


def _parse_record(data: bytes) -> Record | None:
    m = _KMSG_HEAD.match(data)
    if not m:
        return None
    body = data[m.end() :]
    text = body.split(b"\n", 1)[0].decode("utf-8", "replace")
    return Record(
        prefix=int(m.group(1)),
        seq=int(m.group(2)),
        usec=int(m.group(3)),
        flags=m.group(4).decode(),
        text=text,
        raw=data,
    )


def read_kmsg() -> list[Record]:
    """Every record currently in the kernel ring buffer, oldest first (non-blocking)."""
    records: list[Record] = []
    fd = os.open(KMSG, os.O_RDONLY | os.O_NONBLOCK)
    try:
        while True:
            try:
                data = os.read(fd, 65536)
            except BlockingIOError:
                break
            except OSError as e:
                if e.errno == errno.EPIPE:  # a record was overwritten under us; go on
                    continue
                raise
            if not data:
                break
            rec = _parse_record(data)
            if rec is not None:
                records.append(rec)
    finally:
        os.close(fd)
    return records


def last_seq() -> int:
    recs = read_kmsg()
    return recs[-1].seq if recs else -1


# --------------------------------------------------------------------------- report extraction

_OOM_KILL = re.compile(r"^oom-kill:(.*)$")
_INVOKED = re.compile(r"^(?P<comm>.*) invoked oom-killer: ")
_KILLED = re.compile(
    r"(?:Memory cgroup out of memory|Out of memory(?: \(oom_kill_allocating_task\))?)"
    r": Killed process (?P<pid>\d+) \((?P<comm>.*?)\)"
    r"(?: total-vm:(?P<total_vm>\d+)kB, anon-rss:(?P<anon_rss>\d+)kB, "
    r"file-rss:(?P<file_rss>\d+)kB, shmem-rss:(?P<shmem_rss>\d+)kB)?"
)
_TASK_IN = re.compile(r"^Task in (\S+) killed as a result of limit of (\S+)")


def _kv(s: str, key: str) -> str | None:
    m = re.search(r"(?:^|,)" + re.escape(key) + r"=([^,]*)", s)
    return m.group(1) if m else None


def _in_scope(path: str | None, cg: str) -> bool:
    return bool(path) and (path == cg or path.startswith(cg.rstrip("/") + "/"))


@dataclass
class Report:
    seqs: list[int]
    summary: dict


def extract_reports(records: list[Record], cg: str) -> list[Report]:
    """OOM-killer reports (invoked oom-killer .. Killed process [.. oom_reaper]) for cgroup cg."""
    reports: list[Report] = []
    used_until = -1  # index of the last record of the previous report
    for i, rec in enumerate(records):
        if i <= used_until:
            continue
        m = _OOM_KILL.match(rec.text)
        t = _TASK_IN.match(rec.text)
        if m:
            ok = _in_scope(_kv(m.group(1), "oom_memcg"), cg) or _in_scope(_kv(m.group(1), "task_memcg"), cg)
        elif t:
            ok = _in_scope(t.group(1), cg) or _in_scope(t.group(2), cg)
        else:
            continue
        if not ok:
            continue
        start = i
        for j in range(i - 1, used_until, -1):
            if _KILLED.search(records[j].text) or _OOM_KILL.match(records[j].text):
                break  # walked into the previous report: no header found
            if _INVOKED.match(records[j].text):
                start = j
                break
        end = i
        killed = None
        for j in range(i, min(len(records), i + 400)):
            k = _KILLED.search(records[j].text)
            if k:
                end, killed = j, k
                break
        seqs = [r.seq for r in records[start : end + 1]]
        inv = _INVOKED.match(records[start].text)
        summary: dict = {"invoked_by": inv["comm"] if inv else None}
        if m:
            for key in ("constraint", "oom_memcg", "task_memcg", "task", "pid"):
                summary[key] = _kv(m.group(1), key)
        if killed:
            summary.update(
                {
                    "killed_pid": int(killed["pid"]),
                    "killed_comm": killed["comm"],
                    "total_vm_kB": _int(killed["total_vm"]),
                    "anon_rss_kB": _int(killed["anon_rss"]),
                    "file_rss_kB": _int(killed["file_rss"]),
                    "shmem_rss_kB": _int(killed["shmem_rss"]),
                }
            )
            reaper = re.compile(rf"^oom_reaper: reaped process {killed['pid']} \(")
            for j in range(end + 1, len(records)):
                if reaper.match(records[j].text):
                    seqs.append(records[j].seq)
                    summary["oom_reaper"] = True
                    if j == end + 1:
                        end = j
                    break
        reports.append(Report(seqs=seqs, summary=summary))
        used_until = end
    return reports


def _int(s: str | None) -> int | None:
    return int(s) if s is not None else None


# --------------------------------------------------------------------------- dmesg rendering

DMESG_FORMATS = [
    ("dmesg.txt", []),
    ("dmesg-T.txt", ["-T"]),
    ("dmesg-iso.txt", ["--time-format", "iso"]),
    ("dmesg-x.txt", ["-x"]),
]

_RAW_START = re.compile(r"^<(\d+)>\[\s*(\d+)\.(\d+)\] ")


def _run_dmesg(args: list[str]) -> list[str]:
    out = subprocess.run(["dmesg", *args], capture_output=True, check=True, env={**os.environ, "TZ": "UTC"})
    return out.stdout.decode("utf-8", "replace").splitlines()


def _record_line_spans(raw_lines: list[str]) -> list[tuple[int, int, int, str]]:
    """(start, end, usec, first-line text) of each record in `dmesg -r` output."""
    spans: list[tuple[int, int, int, str]] = []
    for idx, line in enumerate(raw_lines):
        m = _RAW_START.match(line)
        if m:
            usec = int(m.group(2)) * 1_000_000 + int(m.group(3))
            spans.append((idx, idx + 1, usec, line[m.end() :]))
        elif spans:  # continuation line of a multi-line message
            s = spans[-1]
            spans[-1] = (s[0], idx + 1, s[2], s[3])
    return spans


def render_dmesg(selected: list[Record]) -> dict[str, str]:
    """Run the real dmesg in each format and keep the lines of the selected records.

    Alignment: `dmesg -r` (which shows syslog prefix and microsecond timestamp, like
    /dev/kmsg) and the wanted format are run back to back; both list the same records in the
    same order, so a record found in the -r output by (prefix, timestamp, text) sits at the
    same line index in the other output.  Retried when a new message arrives in between.
    """
    result: dict[str, str] = {}
    if not selected:
        return result
    for fname, args in DMESG_FORMATS:
        for _attempt in range(10):
            raw = _run_dmesg(["-r"])
            other = _run_dmesg(args)
            raw2 = _run_dmesg(["-r"])
            if raw == raw2 and len(raw) == len(other):
                break
            time.sleep(0.2)
        else:
            raise RuntimeError("dmesg output kept changing; cannot align " + fname)
        spans = _record_line_spans(raw)
        keep: list[str] = []
        cursor = 0
        for rec in selected:
            want = unescape(rec.text).split("\n", 1)[0]
            for k in range(cursor, len(spans)):
                s0, s1, usec, text = spans[k]
                if usec == rec.usec and text == want and raw[s0].startswith(f"<{rec.prefix}>"):
                    lines = other[s0:s1]
                    if not lines[0].endswith(want):
                        raise RuntimeError(f"dmesg {args} line {s0} does not end with {want!r}")
                    keep.extend(lines)
                    cursor = k + 1
                    break
            else:
                raise RuntimeError(f"record seq {rec.seq} not found in dmesg -r output")
        result[fname] = "\n".join(keep) + "\n"
    return result


def render_journal(selected: list[Record]) -> tuple[str | None, str]:
    """journalctl -k lines for the selected records, or (None, reason)."""
    if not selected:
        return None, "no records selected"
    try:
        out = subprocess.run(
            ["journalctl", "-k", "-b", "--no-pager", "-o", "short-precise"],
            capture_output=True,
            timeout=30,
        )
    except FileNotFoundError:
        return None, "journalctl is not installed"
    except subprocess.TimeoutExpired:
        return None, "journalctl -k timed out"
    text = out.stdout.decode("utf-8", "replace")
    err = out.stderr.decode("utf-8", "replace").strip()
    lines = text.splitlines()
    keep = []
    want = [unescape(r.text) for r in selected]
    j = 0
    for line in lines:
        if j < len(want) and line.endswith(want[j]):
            keep.append(line)
            j += 1
    if j != len(want):
        why = f"journalctl -k exited {out.returncode}"
        if err:
            why += f" saying: {err.rstrip('.')}"
        elif not lines or lines == ["-- No entries --"]:
            why += " with no entries"
        else:
            why += f"; only {j} of {len(want)} report lines were in the journal"
        return None, why
    return "\n".join(keep) + "\n", "ok"


# --------------------------------------------------------------------------- running


def _procs(cgdir: str) -> list[int]:
    try:
        with open(os.path.join(cgdir, "cgroup.procs")) as f:
            return [int(x) for x in f.read().split()]
    except FileNotFoundError:
        return []


def _cleanup_cgroup(cgdir: str) -> None:
    """SIGKILL what is left in the cgroup (all started by us) and rmdir it."""
    if not os.path.isdir(cgdir):
        return
    deadline = time.monotonic() + 20
    while True:
        pids = _procs(cgdir)
        if not pids:
            try:
                os.rmdir(cgdir)
                return
            except OSError as e:
                if e.errno != errno.EBUSY or time.monotonic() > deadline:
                    raise
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() > deadline:
            raise RuntimeError(f"cgroup {cgdir} still busy: pids {pids}")
        time.sleep(0.1)


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def _read_oom_kill(path: str) -> int | None:
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def _meminfo(key: str) -> str | None:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(key + ":"):
                return " ".join(line.split()[1:])
    return None


def _write(path: str, text: str | bytes) -> None:
    mode = "wb" if isinstance(text, bytes) else "w"
    with open(path, mode) as f:
        f.write(text)


def _first_line(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        return (out.stdout or out.stderr).strip().splitlines()[0]
    except Exception as e:  # noqa: BLE001 - informational only
        return f"unavailable ({e})"


def capture(args: argparse.Namespace) -> int:
    cmd: list[str] = args.command
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise SystemExit("no command given (put it after --)")
    out_dir = args.out
    os.makedirs(out_dir, exist_ok=True)

    parent_path, parent_dir = parent_cgroup()
    name = args.cgroup_name or f"oomwatch-capture-{os.getpid()}"
    cg_path = parent_path.rstrip("/") + "/" + name
    cgdir = os.path.join(parent_dir, name)

    started = _dt.datetime.now(_dt.timezone.utc)
    baseline = last_seq()
    console_path = os.path.join(out_dir, args.console)
    rc: int | None = None
    timed_out = False
    peak = failcnt = oom_kills = None
    limit_bytes = None
    os.mkdir(cgdir)
    try:
        if args.limit.lower() not in ("max", "none", "-1"):
            _write(os.path.join(cgdir, "memory.limit_in_bytes"), args.limit)
        with open(os.path.join(cgdir, "memory.limit_in_bytes")) as f:
            limit_bytes = int(f.read())
        wrapper = [sys.executable, "-c", _WRAPPER, os.path.join(cgdir, "cgroup.procs"), *cmd]
        t0 = time.monotonic()
        with open(console_path, "wb") as console:
            proc = subprocess.Popen(
                wrapper,
                stdin=subprocess.DEVNULL,
                stdout=console,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                rc = proc.wait(timeout=args.timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
                os.killpg(proc.pid, signal.SIGKILL)  # our own session, started above
                rc = proc.wait()
        elapsed = time.monotonic() - t0
        time.sleep(args.settle)  # let oom_reaper / late messages arrive
        peak = _read_int(os.path.join(cgdir, "memory.max_usage_in_bytes"))
        failcnt = _read_int(os.path.join(cgdir, "memory.failcnt"))
        oom_kills = _read_oom_kill(os.path.join(cgdir, "memory.oom_control"))
    finally:
        _cleanup_cgroup(cgdir)

    records = [r for r in read_kmsg() if r.seq > baseline]
    reports = extract_reports(records, cg_path)
    selected_seqs = {s for rep in reports for s in rep.seqs}
    extra_re = re.compile(args.also) if args.also else None
    extra = []
    if extra_re:
        extra = [r for r in records if r.seq not in selected_seqs and extra_re.search(r.text)]
        selected_seqs |= {r.seq for r in extra}
    selected = [r for r in records if r.seq in selected_seqs]

    files = [args.console]
    if selected:
        _write(os.path.join(out_dir, "kmsg.txt"), b"".join(r.raw for r in selected))
        files.append("kmsg.txt")
        for fname, text in render_dmesg(selected).items():
            _write(os.path.join(out_dir, fname), text)
            files.append(fname)
    journal_text, journal_why = render_journal(selected)
    if journal_text is not None:
        _write(os.path.join(out_dir, "journalctl-k.txt"), journal_text)
        files.append("journalctl-k.txt")

    facts = {
        "name": os.path.basename(os.path.normpath(out_dir)),
        "date_utc": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "uname_r": platform.release(),
        "uname_v": platform.version(),
        "machine": platform.machine(),
        "mem_total": _meminfo("MemTotal"),
        "swap_total": _meminfo("SwapTotal"),
        "vm_overcommit_memory": _read_int("/proc/sys/vm/overcommit_memory"),
        "cgroup_version": 1,
        "cgroup_path": cg_path,
        "limit": args.limit,
        "limit_in_bytes": limit_bytes,
        "command": shlex.join(cmd),
        "exit_status": rc,
        "exit_signal": signal.Signals(-rc).name if rc is not None and rc < 0 else None,
        "timed_out": timed_out,
        "memory_max_usage_in_bytes": peak,
        "memory_failcnt": failcnt,
        "memory_oom_control_oom_kill": oom_kills,
        "elapsed_s": round(elapsed, 2),
        "kmsg_baseline_seq": baseline,
        "kmsg_records_after_baseline": len(records),
        "oom_reports": [{"first_seq": rep.seqs[0], **rep.summary} for rep in reports],
        "extra_records": [{"seq": r.seq, "text": r.text} for r in extra],
        "journalctl": journal_why,
        "dmesg_version": _first_line(["dmesg", "--version"]),
        "files": files,
    }
    _write(os.path.join(out_dir, "capture.json"), json.dumps(facts, indent=2) + "\n")
    _write(os.path.join(out_dir, "HOW.md"), _how_md(facts, args))

    print(f"exit status {rc}; {len(reports)} OOM report(s) for {cg_path}; files: {files}")
    for rep in reports:
        print("  ", json.dumps(rep.summary))
    if args.expect_oom and not reports:
        print("ERROR: expected an OOM kill, none found", file=sys.stderr)
        return 1
    return 0


def _how_md(f: dict, args: argparse.Namespace) -> str:
    lines = [f"# {f['name']}", ""]
    if args.description:
        lines += [args.description, ""]
    lines += [
        "Captured for real by `tools/capture/kernel_oom.py` (see `tools/capture/README.md`).",
        "",
        f"* Date (UTC): {f['date_utc']}",
        f"* Kernel (`uname -r`): `{f['uname_r']}` ({f['machine']}); `uname -v`: `{f['uname_v']}`",
        f"* {f['dmesg_version']}",
        f"* Machine: MemTotal {f['mem_total']}, SwapTotal {f['swap_total']}, "
        f"vm.overcommit_memory {f['vm_overcommit_memory']}",
        f"* cgroup v1 memory controller; child cgroup created for the run: `{f['cgroup_path']}`",
        f"* Limit: `memory.limit_in_bytes` = {args.limit} ({f['limit_in_bytes']} bytes)"
        if args.limit.lower() not in ("max", "none", "-1")
        else "* Limit: none written (cgroup used only to scope the kernel messages)",
        "* Command (run from the repository root, stdin /dev/null, stdout+stderr to one file):",
        "",
        "  ```",
        f"  {f['command']}",
        "  ```",
        "",
        f"* Exit status as seen by the capture tool: {f['exit_status']}"
        + (f" ({f['exit_signal']})" if f["exit_signal"] else "")
        + (" — TIMED OUT, killed by the capture tool" if f["timed_out"] else "")
        + f"; ran {f['elapsed_s']} s",
        f"* cgroup counters after the run: `memory.max_usage_in_bytes` "
        f"{f['memory_max_usage_in_bytes']}, `memory.failcnt` {f['memory_failcnt']}, "
        f"`memory.oom_control` oom_kill {f['memory_oom_control_oom_kill']}",
        "",
        "## Files",
        "",
        f"* `{args.console}` — the command's stdout and stderr, interleaved as written, untouched.",
    ]
    if "kmsg.txt" in f["files"]:
        lines += [
            "* `kmsg.txt` — the selected records exactly as read from `/dev/kmsg` (`prefix,seq,usec,flags;text`).",
            "* `dmesg.txt`, `dmesg-T.txt`, `dmesg-iso.txt`, `dmesg-x.txt` — the same records as "
            "printed by the real `dmesg`, `dmesg -T`, `dmesg --time-format iso` and `dmesg -x` "
            "(TZ=UTC), lines picked by aligning each output with `dmesg -r`.",
        ]
    if "journalctl-k.txt" in f["files"]:
        lines.append("* `journalctl-k.txt` — the same records from `journalctl -k -o short-precise`.")
    else:
        lines.append(f"* No `journalctl -k` rendering: {f['journalctl']}.")
    lines += ["* `capture.json` — the facts above, machine-readable.", ""]
    lines += ["## How the kernel messages were filtered", ""]
    if f["oom_reports"]:
        lines += [
            f"`/dev/kmsg` was read before the run (last sequence number {f['kmsg_baseline_seq']})"
            f" and after it; of the {f['kmsg_records_after_baseline']} newer records, each OOM "
            "report whose `oom-kill:` line names the run's cgroup in `oom_memcg=`/`task_memcg=` "
            "was kept whole: from the `invoked oom-killer` record through the "
            "`Killed process` record (and a later `oom_reaper: reaped process <pid>` record, if "
            "any). Nothing inside a report was trimmed.",
            "",
            "| report | first seq | invoked by | constraint | killed pid | comm | anon-rss | "
            "total-vm | oom_reaper line |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for n, r in enumerate(f["oom_reports"], 1):
            lines.append(
                f"| {n} | {r['first_seq']} | {r.get('invoked_by')} | {r.get('constraint')} | "
                f"{r.get('killed_pid')} | {r.get('killed_comm')} | {r.get('anon_rss_kB')} kB | "
                f"{r.get('total_vm_kB')} kB | {'yes' if r.get('oom_reaper') else 'no'} |"
            )
        lines.append("")
    else:
        lines += [
            f"No OOM-killer report named the run's cgroup among the "
            f"{f['kmsg_records_after_baseline']} kernel records logged during the run.",
            "",
        ]
    if f["extra_records"]:
        lines += [
            f"Also kept: the kernel records matching `{args.also}` logged during the run "
            f"(sequence numbers {', '.join(str(r['seq']) for r in f['extra_records'])}).",
            "",
        ]
    for note in args.note or []:
        lines += [note, ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="fixture folder to write")
    p.add_argument("--limit", default="200M", help="memory.limit_in_bytes (e.g. 200M), or max")
    p.add_argument("--timeout", type=float, default=120, help="seconds before SIGKILL")
    p.add_argument("--settle", type=float, default=1.0, help="seconds to wait after exit")
    p.add_argument("--console", default="console.txt", help="file name for stdout+stderr")
    p.add_argument("--cgroup-name", help="child cgroup name (default oomwatch-capture-<pid>)")
    p.add_argument("--also", help="regex: also keep kernel records matching it (e.g. segfault)")
    p.add_argument("--description", help="first paragraph of HOW.md")
    p.add_argument("--note", action="append", help="extra paragraph for HOW.md (repeatable)")
    p.add_argument("--expect-oom", action="store_true", help="exit 1 if no OOM report is found")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    args = p.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("must run as root (creates cgroups, reads /dev/kmsg)")
    # SIGTERM/SIGHUP -> SystemExit, so that the `finally` removing the cgroup still runs.
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda signum, _frame: sys.exit(128 + signum))
    return capture(args)


if __name__ == "__main__":
    sys.exit(main())
