"""`oomwatch agent` as a real subprocess for tests: started on 127.0.0.1:0, its URL read from its log,
scraped over HTTP, stopped by SIGTERM (by the PID it was started with)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

from tests.conftest import ROOT


class AgentProcess:
    def __init__(self, *args: str) -> None:
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        self._own_state = None
        if "--state-dir" not in args:  # never the machine's /var/lib/oomwatch
            self._own_state = tempfile.mkdtemp(prefix="oomwatch-agent-state-")
            args = (*args, "--state-dir", self._own_state)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "oomwatch", "agent", *args],
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.lines: list[str] = []
        self.url = self.wait_for(r"metrics on (https?://\S+/metrics)").group(1)

    def wait_for(self, pattern: str, timeout: float = 30.0) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        assert self.proc.stderr is not None
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            self.lines.append(line)
            m = re.search(pattern, line)
            if m:
                return m
        raise AssertionError(f"no {pattern!r} in the agent's log:\n{''.join(self.lines)}")

    def scrape(self) -> str:
        with urllib.request.urlopen(self.url, timeout=10) as r:
            return r.read().decode()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=20)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            if self.proc.stderr:
                self.lines.extend(self.proc.stderr.readlines())
                self.proc.stderr.close()
            if self._own_state is not None:
                shutil.rmtree(self._own_state, ignore_errors=True)
        return rc


def wait_metric(agent: AgentProcess, pattern: str, timeout: float = 20.0) -> str:
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        text = agent.scrape()
        if re.search(pattern, text, re.M):
            return text
        time.sleep(0.3)
    raise AssertionError(f"no {pattern!r} in /metrics:\n{text[:3000]}")


def wait_ticks(agent: AgentProcess, n: int = 2, timeout: float = 30.0) -> None:
    """Until the agent has sampled ``n`` times (its first tick reads every process once: slow)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = re.search(r"^oomwatch_ticks_total (\S+)", agent.scrape(), re.M)
        if m and float(m.group(1)) >= n:
            return
        time.sleep(0.1)
    raise AssertionError(f"the agent did not tick {n} times in {timeout}s")
