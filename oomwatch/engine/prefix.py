"""Strip log line prefixes (timestamps, syslog headers, stream markers).

`strip_prefix(text)` removes what log collectors put in front of a message and
says what it found. Recognised prefixes, one sample each:

- dmesg:                    `[ 5864.708505] Out of memory: Killed process 13536 (python)`
- dmesg, caller id:         `[ 5864.708505] [  T1234] Out of memory: ...` (also `][ C1]`)
- dmesg -d:                 `[ 5864.708505 <    0.000037>] msg`
- dmesg -T (any locale):    `[Mon Jan  5 15:19:27 2015] msg`, `[mar. août 12 03:54:03 2025] msg`
- dmesg --time-format iso:  `2024-01-05T15:19:27,708440+00:00 msg`
- dmesg -r:                 `<6>[ 5864.708505] msg`
- dmesg -x:                 `kern  :info  : [ 5864.708505] msg`
- /dev/kmsg record:         `6,420,82018607,-;msg` (`6,420,82018607,-,caller=T12;msg`)
- /dev/kmsg dictionary:     ` SUBSYSTEM=memory` (kept as text, kernel=True)
- BSD syslog:               `Jan  5 15:19:27 myhost kernel: [ 5864.708440] msg`
- BSD syslog, no host:      `Jan  5 15:19:27 kernel: msg`
- BSD syslog, other program:`Jan  5 15:19:01 host CRON[14500]: msg`
- RFC 5424 / rsyslog ISO:   `2024-03-01T10:11:12.123456+00:00 host kernel: msg`
- journalctl short:         `Mär 05 10:11:12 host kernel: msg` (any locale: `févr.`, `мар`, `3月`)
- journalctl short-precise: `Mar 05 10:11:12.123456 host kernel: msg`
- journalctl short-iso:     `2024-03-05T10:11:12+0100 host kernel: msg` (and -precise)
- kubectl --timestamps:     `2024-01-05T15:19:27.123456789Z msg`
- containerd / CRI-O file:  `2024-01-05T15:19:27.123456789Z stderr F msg`
- GitHub Actions:           `2024-01-05T15:19:27.1234567Z msg`
- GitLab (FF_TIMESTAMPS):   `2024-01-05T15:19:27.123456Z 00O msg` (`01E`, `00O+` too)
- Jenkins timestamper:      `[2024-01-05T15:19:27.123Z] msg`
- quoted (e-mail, GitHub):  `> [ 5864.708505] msg`, `> > Jan  5 15:19:27 host kernel: msg` (the
                            `> ` marks are taken only before one of the prefixes above)
- syslog tag alone:         `kernel: msg` (a syslog line whose date and host were cut off)
- stream label:             `stderr: msg`, `stdout: msg` (a child's output relayed by its parent, as
                            accelerate's test runner and CI job wrappers print it)
- kubectl logs --prefix:    `[pod/trainer-worker-1/pytorch] msg` (host: the pod's name)

Prefixes nest (a kubectl timestamp before a syslog line before a dmesg bracket),
so up to four layers are stripped. The outermost timestamp and host win.
`kernel` is True when any layer said so: the syslog/journal program is `kernel`,
a kmsg record, a dmesg bracket or `dmesg -x` `kern` facility, or a dmesg ISO
timestamp (comma before the fraction). After an ISO timestamp a syslog header
is only taken for the `kernel` program or a `name[pid]:` tag, so that
`2024-01-05T15:19:27Z Epoch 1: loss` stays message text. Python logging
prefixes (`2024-01-05 15:19:27,123 INFO ...`) are message text and are kept.
Only one separator space is removed after a prefix: the message keeps its own
indentation (call traces). Unrecognised text comes back unchanged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Prefixed", "strip_prefix"]

_MAX_LAYERS = 4


@dataclass(frozen=True, slots=True)
class Prefixed:
    """The result of `strip_prefix`: the prefix's timestamp text, the message,
    whether the prefix marks kernel output, and the syslog/journal host."""

    time: str | None
    text: str
    kernel: bool = False
    host: str | None = None


# [ 5864.708505] / [ 5864.708505 <    0.000037>], then an optional [  T123] / [C1].
_DMESG = re.compile(r"\[\s*(\d+\.\d+)(?:\s*<\s*[\d.]+>)?\] ?(?:\[\s*[TC]\d+\] ?)?")
# [Mon Jan  5 15:19:27 2015]: weekday and month are any non-space words (locales).
_DMESG_T = re.compile(r"\[([^\s\]]+ +[^\s\]]+ +\d{1,2} +\d{1,2}:\d\d:\d\d +\d{4})(?: *<\s*[\d.]+>)?\] ?")
# RFC 3339-ish: 2024-01-05T15:19:27[.,fraction][Z|+01:00|+0100|+01]
_ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d(?::?\d\d)?)?"
# kubectl logs --prefix: [pod/NAME/CONTAINER] (Kubernetes object names: DNS labels and subdomains)
_KUBECTL = re.compile(r"\[pod/([a-z0-9][a-z0-9.-]{0,252})/[a-z0-9][a-z0-9-]{0,62}\] ?")
_JENKINS = re.compile(r"\[(" + _ISO + r")\] ?")
_ISO_LEAD = re.compile(r"(" + _ISO + r")(?: |$)")
_CRI = re.compile(r"(?:stdout|stderr) [FP](?: |$)")
_GITLAB = re.compile(r"[0-9a-f]{2}[OE](?:\+ ?| |$)")
# After an ISO stamp: only `kernel:` or `name[pid]:` count as a syslog tag.
_TAG_STRICT = re.compile(r"(?:([\w.-]+) )?(kernel|[^\s:\[\]]+\[\d+\]):(?: |$)")
# After a BSD stamp: `[host ]tag[[pid]]: `.
_TAG_LOOSE = re.compile(r"(?:([^\s:\[\]]+) )?([^\s:\[\]]+)(?:\[\d+\])?:(?: |$)")
# Jan  5 15:19:27 / Mär 05 10:11:12.123456 / févr. 05 ... / 3月 05 ...
_BSD = re.compile(r"([^\W\d_]{2,6}\.?|\d{1,2}[月월]) +(\d{1,2}) (\d\d:\d\d:\d\d(?:\.\d+)?)(?: +|$)")
# level/facility,seq,usec,flags[,more];msg
_KMSG = re.compile(r"\d{1,4},\d+,(\d+),[^;,]*(?:,[^;]*)?;")
_KMSG_DICT = re.compile(r" [A-Z][A-Z0-9_]*=")
_PRIO = re.compile(r"<\d{1,3}>")
# OpenWrt/BusyBox logread: "Sat Jan 25 09:40:15 2020 kern.err kernel: msg"
_LOGREAD = re.compile(r"([A-Z][a-z]{2} [A-Z][a-z]{2} +\d{1,2} \d\d:\d\d:\d\d \d{4}) \w+\.\w+ ([^\s:\[]+)(?:\[\d+\])?: ")
# a dmesg stamp whose "[" was lost when the paste was cut ("5193605.506728] Task in ...")
_DMESG_CUT = re.compile(r"\s*(\d+\.\d{6})\] ")
_QUOTED = re.compile(r"(?:>[ \t]?)+")
_BARE_KERNEL_TAG = "kernel: "
_STREAM_LABELS = ("stderr: ", "stdout: ")  # a child's output relayed by its parent (accelerate's test runner)
_DMESG_X = re.compile(
    r"(kern|user|mail|daemon|auth|syslog|lpr|news|uucp|cron|authpriv|ftp|local[0-7])"
    r" *:(emerg|alert|crit|err|warn|notice|info|debug) *: ?"
)

_Step = tuple[str | None, str, bool, str | None]


def _after_bracket(text: str) -> _Step | None:
    m = _DMESG.match(text)
    if m:
        return m.group(1), text[m.end() :], True, None
    m = _DMESG_T.match(text)
    if m:
        return " ".join(m.group(1).split()), text[m.end() :], True, None
    m = _JENKINS.match(text)
    if m:
        return m.group(1), text[m.end() :], False, None
    m = _KUBECTL.match(text)
    if m:
        return None, text[m.end() :], False, m.group(1)
    return None


def _after_iso(text: str) -> _Step | None:
    m = _ISO_LEAD.match(text)
    if m is None:
        return None
    stamp, pos = m.group(1), m.end()
    for marker in (_CRI, _GITLAB):
        mm = marker.match(text, pos)
        if mm:
            return stamp, text[mm.end() :], False, None
    mm = _TAG_STRICT.match(text, pos)
    if mm:
        return stamp, text[mm.end() :], mm.group(2) == "kernel", mm.group(1)
    # dmesg --time-format iso writes a comma before the fraction; RFC 3339 a dot.
    return stamp, text[pos:], "," in stamp, None


def _after_bsd(text: str) -> _Step | None:
    m = _BSD.match(text)
    if m is None:
        return None
    stamp = f"{m.group(1)} {m.group(2)} {m.group(3)}"
    mm = _TAG_LOOSE.match(text, m.end())
    if mm:
        return stamp, text[mm.end() :], mm.group(2) == "kernel", mm.group(1)
    return stamp, text[m.end() :], False, None


def _strip_one(text: str) -> _Step | None:
    """Remove one prefix layer, or None when the text starts with none."""
    if not text:
        return None
    c = text[0]
    if c == "[":
        return _after_bracket(text)
    if "0" <= c <= "9":
        if len(text) > 10 and text[4] == "-":
            return _after_iso(text)
        m = _KMSG.match(text)
        if m:
            return m.group(1), text[m.end() :], True, None
        if "月" in text[1:3] or "월" in text[1:3]:
            return _after_bsd(text)
        m = _DMESG_CUT.match(text)
        if m:
            return m.group(1), text[m.end() :], True, None
        return None
    if c == "<":
        m = _PRIO.match(text)
        return (None, text[m.end() :], False, None) if m else None
    if c == ">":  # quote marks: a log line quoted in a reply, when a prefix follows them
        m = _QUOTED.match(text)
        rest = text[m.end() :] if m else ""
        return _strip_one(rest) if rest[:1] != ">" else None
    if c.isalpha():
        if text.startswith(_BARE_KERNEL_TAG):
            return None, text[len(_BARE_KERNEL_TAG) :], True, None
        if text.startswith(_STREAM_LABELS):
            return None, text[len("stderr: ") :], False, None
        m = _DMESG_X.match(text)
        if m:
            return None, text[m.end() :], m.group(1) == "kern", None
        m = _LOGREAD.match(text)
        if m:
            return m.group(1), text[m.end() :], m.group(2) == "kernel", None
        return _after_bsd(text)
    return None


def strip_prefix(text: str) -> Prefixed:
    """Strip up to four nested log prefixes from one decoded line.

    >>> strip_prefix("Jan  5 15:19:27 node1 kernel: [ 5864.708440] Out of memory")
    Prefixed(time='Jan 5 15:19:27', text='Out of memory', kernel=True, host='node1')
    """
    if text[:1] == " " and _KMSG_DICT.match(text):
        return Prefixed(None, text, True, None)
    time: str | None = None
    host: str | None = None
    kernel = False
    for _ in range(_MAX_LAYERS):
        step = _strip_one(text)
        if step is None:
            break
        t, text, k, h = step
        if time is None:
            time = t
        if host is None:
            host = h
        kernel = kernel or k
    return Prefixed(time, text, kernel, host)
