"""A hostile or broken configuration file is an error, never an exit: at start a one-line error and exit 2,
on SIGHUP "reload failed" in the log and the running configuration kept (the agent goes on serving)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from oomwatch.agent.config import MAX_CONFIG_BYTES, load_config
from oomwatch.agent.serve.webconfig import load_web_config
from oomwatch.errors import ConfigError
from tests.agent.agentproc import AgentProcess
from tests.conftest import run_oomwatch


def _laughs(levels: int = 9) -> bytes:
    """Billion laughs: each level is nine aliases of the one before (9**9 strings once expanded)."""
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, levels + 1)]
    return ("\n".join(lines) + f"\ninterval: *l{levels}\n").encode()


def _file(data: bytes) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        path.write_bytes(data)

    return make


def _directory(path: Path) -> None:
    path.mkdir()


def _dangling(path: Path) -> None:
    path.symlink_to(path.parent / "no-such-target.yaml")


def _fifo(path: Path) -> None:  # reading one would block until a writer comes: never
    os.mkfifo(path)


# each: how to put the bad file at the path, and what the error must say
BAD: dict[str, tuple[Callable[[Path], None], str]] = {
    "latin1_byte": (_file(b"listen: '127.0.0.1:0'\n# caf\xe9\n"), "not UTF-8"),
    "deep_flow": (_file(b"interval: " + b"[" * 20_000 + b"]" * 20_000 + b"\n"), "nested more than"),
    "deep_block": (_file(("top_n:\n" + "".join(" " * i + "-\n" for i in range(1, 200))).encode()), "nested more than"),
    "billion_laughs": (_file(_laughs()), "aliases expand to more than"),
    "alias_to_itself": (_file(b"interval: &a [*a]\n"), "refers to itself"),
    "list_for_number": (_file(b"interval: [1, 2]\n"), "interval must be a number"),
    "mapping_for_string": (_file(b"listen: {host: x}\n"), "listen must be a string"),
    "mapping_for_path": (_file(b"state_dir: {a: 1}\n"), "state_dir must be a path"),
    "list_for_bool": (_file(b"read_code: [true]\n"), "read_code must be true or false"),
    "complex_key": (_file(b"? [interval, top_n]\n: 1\n"), "unhashable key"),
    "number_key": (_file(b"5: 1\n"), "unknown key(s) 5"),
    "huge_integer": (_file(b"top_n: " + b"9" * 400 + b"\n"), "top_n must be between"),
    "integer_too_long_to_read": (_file(b"top_n: " + b"9" * 5000 + b"\n"), "cannot read"),
    "no_such_date": (_file(b"interval: 2001-02-30\n"), "cannot read"),
    "nul_in_path": (_file(b'web_config: "web\\0.yaml"\n'), "NUL byte"),
    "huge_file": (_file(b"# " + b"x" * MAX_CONFIG_BYTES + b"\n"), "larger than 1 MiB"),
    "a_list": (_file(b"- interval\n- 1\n"), "expected a mapping"),
    "a_directory": (_directory, "it is a directory"),
    "dangling_symlink": (_dangling, "cannot read config"),
    "fifo": (_fifo, "not a regular file"),
}


def _one_line(message: str) -> None:
    assert "\n" not in message.strip(), message
    assert len(message) < 400, message


@pytest.mark.parametrize("shape", sorted(BAD))
def test_load_config_refuses_each_bad_shape_with_an_error(tmp_path: Path, shape: str) -> None:
    make, said = BAD[shape]
    path = tmp_path / "agent.yaml"
    make(path)
    started = time.monotonic()
    with pytest.raises(ConfigError) as caught:
        load_config(path, {})
    assert time.monotonic() - started < 5  # bounded: neither expanded nor recursed into
    message = str(caught.value)
    assert said in message
    assert str(path) in message
    _one_line(message)


def test_an_unreadable_config_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text("interval: 1\n")
    path.chmod(0)
    if os.geteuid() != 0:
        with pytest.raises(ConfigError, match="cannot read config .*Permission denied"):
            load_config(path, {})
        return
    # root reads a file of mode 0: the agent started as root without the capabilities that override file
    # modes (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH) meets it as an unprivileged one would
    import subprocess
    import sys

    from tests.conftest import ROOT, require_tool

    setpriv = require_tool("setpriv", "Debian: util-linux")
    drop = "-dac_override,-dac_read_search"
    done = subprocess.run(
        [setpriv, f"--bounding-set={drop}", f"--inh-caps={drop}", sys.executable, "-m", "oomwatch", "agent",
         "--config", str(path), "--listen", "127.0.0.1:0"],
        capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot read config" in lines[0] and "Permission denied" in lines[0], lines


@pytest.mark.parametrize("shape", ["latin1_byte", "deep_flow", "billion_laughs", "huge_file", "a_directory", "fifo"])
def test_the_web_config_refuses_the_same_shapes(tmp_path: Path, shape: str) -> None:
    make, _ = BAD[shape]
    path = tmp_path / "web.yaml"
    make(path)
    with pytest.raises(ConfigError) as caught:
        load_web_config(path)
    assert str(path) in str(caught.value)
    _one_line(str(caught.value))


@pytest.mark.parametrize("shape", sorted(BAD))
def test_the_agent_refuses_a_bad_config_at_start_in_one_line(tmp_path: Path, shape: str) -> None:
    make, said = BAD[shape]
    path = tmp_path / "agent.yaml"
    make(path)
    done = run_oomwatch("agent", "--config", str(path), "--listen", "127.0.0.1:0", "--state-dir", str(tmp_path))
    err = done.stderr.decode("utf-8", "replace")
    assert done.returncode == 2, err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("oomwatch: ") and said in err


def test_sighup_with_each_bad_config_keeps_the_agent_and_its_configuration(tmp_path: Path) -> None:
    path = tmp_path / "agent.yaml"
    good = "interval: 0.3\npss_budget: 0.37\n"
    path.write_text(good)
    agent = AgentProcess("--listen", "127.0.0.1:0", "--config", str(path))
    try:
        for shape in sorted(BAD):
            make, said = BAD[shape]
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
            make(path)
            agent.proc.send_signal(signal.SIGHUP)
            line = agent.wait_for(r"reload failed, keeping the running configuration.*").group(0)
            assert said in line, (shape, line)
            assert agent.proc.poll() is None, f"the agent exited on {shape}"
            # still serving, and with the configuration it had (the budget is exported as is)
            assert re.search(r"^oomwatch_smaps_budget_ratio 0\.37$", agent.scrape(), re.M), shape
        path.unlink()
        path.write_text("interval: 0.3\npss_budget: 0.25\n")
        agent.proc.send_signal(signal.SIGHUP)
        agent.wait_for(r"configuration reloaded: .*smaps budget 0.25")
        assert re.search(r"^oomwatch_smaps_budget_ratio 0\.25$", agent.scrape(), re.M)
    finally:
        rc = agent.stop()
    log = "".join(agent.lines)
    assert rc == 0, log
    assert "Traceback" not in log
