"""The agent's systemd unit (deploy/systemd/): `systemd-analyze verify` and `security` on it, the
settings the agent depends on, and the example config.

systemd-analyze runs without systemd as PID 1 (it only parses unit files), as root or not; it is
skipped where it is not installed, except in CI (CI=true), where that is a failure.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest
import yaml

from oomwatch.agent.config import AgentConfig, load_config
from tests.conftest import require_tool

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "systemd"
UNIT = DEPLOY / "oomwatch.service"
CONFIG = DEPLOY / "agent.yaml"

INSTALLED_BINARY = "/usr/local/bin/oomwatch"
CAPABILITIES = {"CAP_SYS_PTRACE", "CAP_DAC_READ_SEARCH", "CAP_SYSLOG"}
RSS_TARGET = 60 * 1000 * 1000  # the agent's measured RSS target: < 60 MB with 1000 processes
# `systemd-analyze security --offline=true` measured 2.5 ("OK") with systemd 252 (Debian 12).
# Other systemd versions weigh some settings differently, hence the margin; a rise above it
# means the unit lost some hardening.
MAX_EXPOSURE = 3.0
CONFIG_KEYS = {f.name for f in fields(AgentConfig)}


# --------------------------------------------------------------------------- helpers


def systemd_analyze() -> str:
    return require_tool("systemd-analyze", "Debian/Ubuntu: apt-get install systemd")


def analyze(*args: str) -> subprocess.CompletedProcess[str]:
    """Run systemd-analyze with its logging pinned, whatever SYSTEMD_* the caller exported: to
    stderr (not the journal), at the default level (info: debug would bury the test in noise,
    a higher one would hide warnings), no colours."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYSTEMD_")}
    env.update(SYSTEMD_LOG_TARGET="console", SYSTEMD_LOG_LEVEL="info", SYSTEMD_LOG_COLOR="0", SYSTEMD_COLORS="0")
    return subprocess.run([systemd_analyze(), *args], capture_output=True, text=True, env=env, timeout=120, check=False)


def unit_copy(directory: Path, text: str | None = None) -> Path:
    """The unit as `systemd-analyze` can check it here: verify requires ExecStart's binary to
    exist and be executable, and /usr/local/bin/oomwatch exists only where it was installed
    as root. Any executable will do (arguments are not checked): the oomwatch entry point
    when it is on PATH, else this Python."""
    text = UNIT.read_text() if text is None else text
    assert INSTALLED_BINARY in text, f"ExecStart of {UNIT} no longer runs {INSTALLED_BINARY}"
    copy = directory / "oomwatch.service"
    copy.write_text(text.replace(INSTALLED_BINARY, shutil.which("oomwatch") or sys.executable))
    # verify warns about unit files that are executable or world-writable; make the mode
    # independent of the umask the tests run under
    copy.chmod(0o644)
    return copy


def verify(unit: Path) -> tuple[int, str]:
    """Exit status and everything `systemd-analyze verify` printed.

    No message needs filtering: on Debian 12 (systemd 252) in a container without systemd as
    PID 1, as root and as nobody, it prints nothing for a good unit. --man=no: the unit has no
    Documentation= and man pages may not be installed; --generators=no: generators read the
    host's fstab, kernel command line etc., which is not what is being tested."""
    result = analyze("verify", "--man=no", "--generators=no", str(unit))
    return result.returncode, (result.stdout + result.stderr).strip()


def parse_unit(text: str) -> dict[str, dict[str, list[str]]]:
    """Section -> key -> every assignment in order (systemd allows repeated keys). Comments
    start with # or ;, a trailing backslash continues the line."""
    sections: dict[str, dict[str, list[str]]] = {}
    section: dict[str, list[str]] | None = None
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip()
        pending = ""
        if not line or line[0] in "#;":
            continue
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        if line.startswith("[") and line.endswith("]"):
            section = sections.setdefault(line[1:-1], {})
            continue
        assert section is not None, f"assignment outside a section: {line!r}"
        key, sep, value = line.partition("=")
        assert sep, f"not a key=value line: {line!r}"
        section.setdefault(key.strip(), []).append(value.strip())
    return sections


def capability_set(assignments: list[str]) -> set[str]:
    """What repeated CapabilityBoundingSet=/AmbientCapabilities= lines add up to: lists are
    merged, an empty assignment resets. The unit must name what it keeps, so a ~ (drop-list)
    is refused here rather than interpreted."""
    caps: set[str] = set()
    for value in assignments:
        if not value:
            caps.clear()
            continue
        assert not value.startswith("~"), f"capabilities must be an allow-list, not {value!r}"
        caps.update(value.split())
    return caps


def size_bytes(value: str) -> int:
    """A systemd size (MemoryMax=256M): bytes, or K/M/G/T with binary multiples."""
    m = re.fullmatch(r"(\d+)([KMGT]?)", value)
    assert m, f"expected a byte size, not {value!r} (percentages and infinity set no fixed cap)"
    return int(m.group(1)) * 1024 ** " KMGT".index(m.group(2) or " ")


@pytest.fixture(scope="module")
def service() -> dict[str, list[str]]:
    return parse_unit(UNIT.read_text())["Service"]


def last(service: dict[str, list[str]], key: str) -> str | None:
    """The value in effect for a single-valued key (the last assignment wins)."""
    values = service.get(key)
    return values[-1] if values else None


# --------------------------------------------------------------------------- systemd-analyze


def test_verify_is_silent(tmp_path):
    rc, output = verify(unit_copy(tmp_path))
    # verify exits 0 on unknown keys and bad values; only its silence says the unit is clean
    assert output == "", f"systemd-analyze verify complained about {UNIT.name}:\n{output}"
    assert rc == 0


def test_verify_reports_a_bogus_key(tmp_path):
    """The test above can fail: an unknown key in the copy is reported."""
    text = UNIT.read_text().replace("[Service]\n", "[Service]\nFoo=bar\n", 1)
    _, output = verify(unit_copy(tmp_path, text))
    assert re.search(r"unknown key.*\bFoo\b", output, re.IGNORECASE), output


def test_security_exposure(tmp_path):
    unit = unit_copy(tmp_path)
    result = analyze("security", "--offline=true", "--no-pager", str(unit))
    table = result.stdout + result.stderr
    record = tmp_path / "systemd-analyze-security.txt"
    record.write_text(table)
    print(f"\n{table}\n(recorded in {record})")
    assert result.returncode == 0, table
    m = re.search(r"Overall exposure level for oomwatch\.service: (\d+(?:\.\d+)?) (\w+)", table)
    assert m, f"no overall exposure level in:\n{table}"
    exposure = float(m.group(1))
    assert exposure <= MAX_EXPOSURE, f"exposure {exposure} {m.group(2)} > {MAX_EXPOSURE}:\n{table}"


# --------------------------------------------------------------------------- the unit's settings


def test_oom_settings(service):
    assert last(service, "OOMScoreAdjust") == "-1000"
    memory_max = last(service, "MemoryMax")
    assert memory_max, "MemoryMax= must cap the agent's own memory"
    # a cap under the RSS target would kill the agent in normal operation; one of gigabytes caps nothing
    assert 2 * RSS_TARGET <= size_bytes(memory_max) <= 1024**3


def test_exactly_three_capabilities(service):
    assert capability_set(service.get("CapabilityBoundingSet", [])) == CAPABILITIES
    assert capability_set(service.get("AmbientCapabilities", [])) == CAPABILITIES


def test_agent_still_sees_everything(service):
    """Hardening that would blind the agent: hidden processes, no /proc/meminfo, no /dev/kmsg,
    capabilities confined to a user namespace."""
    allowed = {
        "ProtectProc": {None, "default"},
        "ProcSubset": {None, "all"},
        "PrivatePIDs": {None, "no"},
        "PrivateUsers": {None, "no"},
        "PrivateDevices": {None, "no"},
        "ProtectKernelLogs": {None, "no"},
        "PrivateNetwork": {None, "no"},
    }
    for key, values in allowed.items():
        assert last(service, key) in values, f"{key}={last(service, key)}"
    assert last(service, "DevicePolicy") == "closed"
    assert "/dev/kmsg r" in service.get("DeviceAllow", [])
    assert last(service, "StateDirectory") == "oomwatch"
    assert last(service, "Restart") == "on-failure"
    assert last(service, "ExecStart") == f"{INSTALLED_BINARY} agent --config /etc/oomwatch/agent.yaml"


def test_every_block_is_commented():
    """Each block of settings (lines between blank lines) starts with a comment saying why."""
    block: list[str] = []
    for line in [*UNIT.read_text().splitlines(), ""]:
        stripped = line.strip()
        if stripped and not stripped.startswith("["):
            block.append(stripped)
            continue
        if any(not b.startswith("#") for b in block):
            assert block[0].startswith("#"), "block without a comment:\n" + "\n".join(block)
        block = []


# --------------------------------------------------------------------------- the example config


def test_example_config():
    config = yaml.safe_load(CONFIG.read_text())
    assert isinstance(config, dict)
    assert set(config) <= CONFIG_KEYS, f"unknown keys: {sorted(set(config) - CONFIG_KEYS)}"
    assert config == {
        "listen": ":9797",
        "interval": 1.0,
        "pss_budget": 0.05,
        "top_n": 20,
        "top_workers": 1,
        "state_dir": "/var/lib/oomwatch",
    }
    assert load_config(CONFIG, {}) == AgentConfig()  # the example shows the defaults, through the real loader
    # web_config is optional and shown commented out
    assert re.search(r"^# web_config: /\S+$", CONFIG.read_text(), re.MULTILINE)
