"""The alerts end to end, with real parts: the real `oomwatch agent`, a real Prometheus server (Debian's,
bound to 127.0.0.1) scraping it every second with the shipped rules, a real Alertmanager routing to a
webhook served by this test, and a real OOM kill by the kernel of a process in a v1 memory cgroup.
The OOM-kill alert must fire with the victim's labels (through /api/v1/alerts) and reach the webhook.
Everything started here is stopped by its pid.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.agent.agentproc import AgentProcess, wait_ticks
from tests.agent.test_incidents import _hog_script, _run_hog, _wait_incidents
from tests.conftest import ROOT, require_root_cgroup, require_tool, terminate

RULES = ROOT / "deploy" / "prometheus" / "oomwatch.rules.yaml"


def _epoch(stamp: str) -> float:
    """Prometheus's RFC 3339 time (nanoseconds) as seconds since the epoch."""
    head, _, frac = stamp.rstrip("Z").partition(".")
    whole = datetime.fromisoformat(head).replace(tzinfo=timezone.utc).timestamp()
    return whole + float(f"0.{frac or 0}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())


@contextlib.contextmanager
def _server(args: list[str], ready_url: str, log: Path) -> Iterator[subprocess.Popen]:
    """A server process, until its ready URL answers; stopped by its pid (SIGTERM, then SIGKILL)."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(ready_url, timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"{args[0]} did not start:\n{log.read_text()[-3000:]}") from None
                time.sleep(0.2)
        yield proc
    finally:
        terminate(proc)


class _Webhook(BaseHTTPRequestHandler):
    received: list[tuple[float, dict]] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        _Webhook.received.append((time.time(), json.loads(body)))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *_: object) -> None:
        pass


def test_an_oom_kill_fires_the_alert_with_the_victims_labels(tmp_path: Path):
    require_root_cgroup()
    prometheus = require_tool("prometheus", "Debian: apt-get install prometheus")
    alertmanager = require_tool("prometheus-alertmanager", "Debian: apt-get install prometheus-alertmanager")
    state = tmp_path / "state"
    agent = AgentProcess("--listen", "127.0.0.1:0", "--interval", "0.2", "--state-dir", str(state))
    hook = ThreadingHTTPServer(("127.0.0.1", 0), _Webhook)
    threading.Thread(target=hook.serve_forever, daemon=True).start()
    _Webhook.received = []
    try:
        wait_ticks(agent)
        target = urllib.parse.urlparse(agent.url).netloc
        am_port, prom_port = _free_port(), _free_port()
        (tmp_path / "alertmanager.yml").write_text(
            "route: {receiver: hook, group_by: [alertname, incident], group_wait: 0s, group_interval: 1s}\n"
            f"receivers: [{{name: hook, webhook_configs: [{{url: 'http://127.0.0.1:{hook.server_port}/'}}]}}]\n"
        )
        shutil.copy(RULES, tmp_path / RULES.name)
        (tmp_path / "prometheus.yml").write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            f"rule_files: [{RULES.name}]\n"
            f"alerting: {{alertmanagers: [{{static_configs: [{{targets: ['127.0.0.1:{am_port}']}}]}}]}}\n"
            f"scrape_configs: [{{job_name: oomwatch, static_configs: [{{targets: ['{target}']}}]}}]\n"
        )
        am_args = [alertmanager, f"--config.file={tmp_path / 'alertmanager.yml'}",
                   f"--storage.path={tmp_path / 'am'}", f"--web.listen-address=127.0.0.1:{am_port}",
                   "--cluster.listen-address="]  # fmt: skip
        prom_args = [prometheus, f"--config.file={tmp_path / 'prometheus.yml'}",
                     f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{prom_port}"]  # fmt: skip
        api = f"http://127.0.0.1:{prom_port}/api/v1"
        with (
            _server(am_args, f"http://127.0.0.1:{am_port}/-/ready", tmp_path / "alertmanager.log"),
            _server(prom_args, f"http://127.0.0.1:{prom_port}/-/ready", tmp_path / "prometheus.log"),
        ):
            # the first scrape before the kill (a series must exist before its change can be seen)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                up = _get(f"{api}/query?query=" + urllib.parse.quote('up{job="oomwatch"}'))["data"]["result"]
                if up and up[0]["value"][1] == "1":
                    break
                time.sleep(0.2)
            else:
                raise AssertionError(
                    f"Prometheus never scraped the agent:\n{(tmp_path / 'prometheus.log').read_text()}"
                )
            rules = _get(f"{api}/rules")["data"]["groups"]
            assert sum(len(g["rules"]) for g in rules) == 10, rules

            done, _ = _run_hog(_hog_script(tmp_path), 160 << 20)
            workers = {int(m) for m in re.findall(rb"pid (\d+)\) is killed", done.stderr)}
            assert len(workers) == 2, done.stderr
            incidents = [json.loads(p.read_text()) for p in _wait_incidents(state, workers)]
            assert len(incidents) == 2

            firing: list[dict] = []
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and len(firing) < 2:
                alerts = _get(f"{api}/alerts")["data"]["alerts"]
                firing = [a for a in alerts if a["labels"]["alertname"] == "OomwatchOOMKill"
                          and a["state"] == "firing" and a["labels"].get("incident") in {d["id"] for d in incidents}]  # fmt: skip
                time.sleep(0.1)
            assert len(firing) == 2, alerts
            for a in firing:
                doc = next(d for d in incidents if d["id"] == a["labels"]["incident"])
                labels = a["labels"]
                assert labels["training_job"] == doc["victim"]["job"] and labels["role"] == "dataloader_worker"
                assert labels["comm"] == "pt_data_worker" and labels["verdict"] == "cgroup_oom"
                assert labels["cause"] == doc["diagnosis"]["causes"][0]["id"] and labels["severity"] == "critical"
                assert f"oomwatch incidents show {doc['id']}" in a["annotations"]["description"]
                assert a["annotations"]["fix"] == doc["diagnosis"]["causes"][0]["remedy"]

            # and through Alertmanager to the webhook
            deadline = time.monotonic() + 30
            delivered: list[dict] = []
            while time.monotonic() < deadline and len(delivered) < 2:
                delivered = [a for _, payload in _Webhook.received for a in payload["alerts"]
                             if a["labels"].get("alertname") == "OomwatchOOMKill" and a["status"] == "firing"
                             and a["labels"].get("incident") in {d["id"] for d in incidents}]  # fmt: skip
                time.sleep(0.1)
            assert {a["labels"]["incident"] for a in delivered} == {d["id"] for d in incidents}, _Webhook.received
            # per incident: the kernel's kill in wall-clock time (the incident's time less its latency from
            # the kill line) to when Prometheus made the alert active (for: 0m: firing) and to the webhook call
            to_alert, to_hook = [], []
            for doc in incidents:
                killed = doc["time"] - doc["latency_seconds"]
                alert = next(a for a in firing if a["labels"]["incident"] == doc["id"])
                to_alert.append(_epoch(alert["activeAt"]) - killed)
                to_hook.append(min(t for t, payload in _Webhook.received for a in payload["alerts"]
                                   if a["labels"].get("incident") == doc["id"]) - killed)  # fmt: skip
            print(f"kernel kill to incident {max(d['latency_seconds'] for d in incidents):.2f} s, to the alert firing "
                  f"{max(to_alert):.2f} s, to the webhook {max(to_hook):.2f} s")  # fmt: skip
            assert all(0 < t < 10 for t in to_alert + to_hook), (to_alert, to_hook)
    finally:
        hook.shutdown()
        hook.server_close()
        agent.stop()
