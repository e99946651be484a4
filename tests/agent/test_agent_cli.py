"""`oomwatch agent` as a real process: scraped over HTTP, reloaded on SIGHUP, stopped by SIGTERM;
its configuration file checked with clear errors."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from oomwatch.agent.config import AgentConfig, load_config
from oomwatch.errors import ConfigError
from tests.agent.agentproc import AgentProcess, wait_metric
from tests.agent.proctree import rank_tree
from tests.conftest import ROOT, run_oomwatch


def test_agent_scrape_reload_and_clean_stop(tmp_path: Path):
    config = tmp_path / "agent.yaml"
    config.write_text("interval: 0.3\ntop_n: 2\npss_budget: 0.5\n")
    with rank_tree(size_mib=32, workers=2) as tree:
        agent = AgentProcess("--listen", "127.0.0.1:0", "--config", str(config))
        try:
            worker = tree.workers[0]
            text = wait_metric(agent, rf'^oomwatch_process_uss_bytes\{{.*pid="{worker}".*\}} ')
            line = next(
                x for x in text.splitlines() if x.startswith("oomwatch_process_uss_bytes") and f'pid="{worker}"' in x
            )
            assert 'role="dataloader_worker"' in line and f'training_job="{tree.run_id}"' in line and 'rank="0"' in line
            rank_line = next(
                x for x in text.splitlines() if x.startswith("oomwatch_process_pss_bytes") and f'pid="{tree.rank}"' in x
            )
            assert 'role="rank"' in rank_line
            others = {m for m in re.findall(r'^oomwatch_process_resident_bytes\{.*role="other".*\}', text, re.M)}
            assert len(others) <= 2
            # SIGHUP: the file is read again (top_n 2 -> 0: no per-process series outside jobs)
            config.write_text("interval: 0.3\ntop_n: 0\npss_budget: 0.5\n")
            agent.proc.send_signal(signal.SIGHUP)
            agent.wait_for(r"configuration reloaded: .*top_n 0")
            time.sleep(0.8)
            text = agent.scrape()
            assert not re.search(r'^oomwatch_process_resident_bytes\{.*role="other"', text, re.M)
            # the agent's own process: its memory (a series name without the oomwatch_ prefix, as exporters do)
            own = re.search(r"^process_resident_memory_bytes (\S+)", text, re.M)
            assert own and 10e6 < float(own.group(1)) < 200e6, own
            # a broken config on reload is logged and the running one kept
            config.write_text("interval: [\n")
            agent.proc.send_signal(signal.SIGHUP)
            agent.wait_for(r"reload failed, keeping the running configuration")
            assert "oomwatch_build_info" in agent.scrape()
        finally:
            rc = agent.stop()
    assert rc == 0, "".join(agent.lines)
    assert any("oomwatch agent stopped" in x for x in agent.lines)


def test_agent_refuses_bad_config_and_taken_port(tmp_path: Path):
    bad = tmp_path / "agent.yaml"
    bad.write_text("interval: 1\nlisten_addr: ':1'\n")
    done = run_oomwatch("agent", "--config", str(bad))
    assert done.returncode == 2
    assert b"unknown key(s) listen_addr" in done.stderr
    agent = AgentProcess("--listen", "127.0.0.1:0")
    try:
        port = agent.url.split(":")[2].split("/")[0]
        done = run_oomwatch("agent", "--listen", f"127.0.0.1:{port}")
        assert done.returncode == 2
        assert f"cannot listen on 127.0.0.1:{port}".encode() in done.stderr
    finally:
        assert agent.stop() == 0


def test_config_file_then_flags(tmp_path: Path):
    f = tmp_path / "a.yaml"
    f.write_text("listen: '127.0.0.1:9000'\ninterval: 2\ntop_n: 5\nweb_config: web.yaml\n")
    c = load_config(f, {"interval": 0.5, "top_n": None})
    assert c == AgentConfig(listen="127.0.0.1:9000", interval=0.5, top_n=5, web_config=tmp_path / "web.yaml")
    assert load_config(None, {}) == AgentConfig()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("interval: fast\n", "interval must be a number"),
        ("interval: 0\n", "interval must be between"),
        ("pss_budget: 2\n", "pss_budget must be between 0 and 1"),
        ("top_n: 1.5\n", "top_n must be an integer"),
        ("listen: 'nohost:'\n", "listen"),
        ("- a\n- b\n", "expected a mapping"),
        ("interval: [\n", "not valid YAML"),
    ],
)
def test_config_errors_are_clear(tmp_path: Path, text: str, message: str):
    f = tmp_path / "a.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(f, {})


def test_missing_config_file(tmp_path: Path):
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(tmp_path / "nope.yaml", {})


def test_the_agent_does_not_load_the_log_engine():
    """The agent's memory matters (it must not be the cause): the rules, the prefilter and Hyperscan
    are loaded by `diagnose` only."""
    code = (
        "import sys, oomwatch.cli, oomwatch.agent.daemon\n"
        "heavy = [m for m in sys.modules if m.startswith(('oomwatch.engine.scanner', 'oomwatch.engine.rules.loader', "
        "'hyperscan', 're2'))]\n"
        "print(heavy)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.stdout.strip() == "[]", done


def test_diagnose_formats_match_the_renderers():
    from oomwatch.cli import FORMATS
    from oomwatch.render.diagnosis import RENDERERS

    assert sorted(RENDERERS) == list(FORMATS)
