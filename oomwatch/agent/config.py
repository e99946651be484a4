"""The agent's configuration: a YAML file, overridden by command-line flags.

Example (``deploy/systemd/agent.yaml``)::

    listen: ":9797"
    interval: 1.0
    pss_budget: 0.05
    top_n: 20
    # web_config: /etc/oomwatch/web.yaml
    # state_dir: /var/lib/oomwatch
    # kernel_log: /var/log/kern.log   # only where /dev/kmsg cannot be read; "journal": journalctl -k -f
    # read_code: false                # never read the jobs' training scripts for the code rules
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import yaml

from oomwatch.agent.http import parse_listen
from oomwatch.errors import ConfigError


@dataclass(frozen=True)
class AgentConfig:
    listen: str = ":9797"
    interval: float = 1.0  # seconds between ticks
    pss_budget: float = 0.05  # fraction of one CPU spent reading smaps_rollup
    top_n: int = 20  # per-process series for processes outside training jobs
    web_config: Path | None = None  # TLS and basic auth (Prometheus exporter-toolkit format)
    state_dir: Path = Path("/var/lib/oomwatch")  # history.db, incidents/, kmsg-position.json
    kernel_log: Path | None = None  # follow this file for OOM reports instead of /dev/kmsg (kern.log)
    # an incident reads the script the job runs (never runs it, never sends it anywhere) for the calls
    # behind each cause (keep_in_memory=True, torch.load without mmap...): false turns it off
    read_code: bool = True


KEYS = {f.name for f in fields(AgentConfig)}


def _number(where: str, key: str, value: Any, low: float, high: float, integer: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not isinstance(value, int)):
        kind = "an integer" if integer else "a number"
        raise ConfigError(f"{where}: {key} must be {kind}, not {value!r}")
    if math.isnan(value) or not low <= value <= high:
        raise ConfigError(f"{where}: {key} must be between {low:g} and {high:g}, not {value!r}")
    return value


def validate(values: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Check keys and values; return them converted (paths as Path)."""
    unknown = sorted(set(values) - KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(KEYS))})")
    out: dict[str, Any] = {}
    for key, value in values.items():
        if value is None:
            continue
        if key == "listen":
            if not isinstance(value, str):
                raise ConfigError(f"{where}: listen must be a string like ':9797' or '127.0.0.1:9797'")
            try:
                parse_listen(value)
            except ConfigError as exc:
                raise ConfigError(f"{where}: {exc}") from None
            out[key] = value
        elif key == "interval":
            out[key] = float(_number(where, key, value, 0.01, 3600))
        elif key == "pss_budget":
            out[key] = float(_number(where, key, value, 0.0, 1.0))
        elif key == "top_n":
            out[key] = int(_number(where, key, value, 0, 100_000, integer=True))
        elif key == "read_code":
            if not isinstance(value, bool):
                raise ConfigError(f"{where}: read_code must be true or false, not {value!r}")
            out[key] = value
        elif key in ("web_config", "state_dir", "kernel_log"):
            if not isinstance(value, (str, Path)) or not str(value):
                raise ConfigError(f"{where}: {key} must be a path")
            out[key] = Path(value)
    return out


def load_config(path: Path | None, flags: Mapping[str, Any]) -> AgentConfig:
    """The file's values (if any), then the flags that were given (not None)."""
    config = AgentConfig()
    if path is not None:
        try:
            text = path.read_text()
        except OSError as exc:
            raise ConfigError(f"cannot read config {path}: {exc.strerror or exc}") from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML: {exc}") from None
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: expected a mapping of keys ({', '.join(sorted(KEYS))})")
        values = validate(data, str(path))
        for key in ("web_config", "state_dir", "kernel_log"):
            if key in values and not values[key].is_absolute():
                values[key] = path.parent / values[key]  # relative to the config file
        config = replace(config, **values)
    given = {k: v for k, v in flags.items() if v is not None}
    return replace(config, **validate(given, "command line"))
