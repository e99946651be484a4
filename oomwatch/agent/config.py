"""The agent's configuration: a YAML file, overridden by command-line flags.

Example (``deploy/systemd/agent.yaml``)::

    listen: ":9797"
    interval: 1.0
    pss_budget: 0.05
    top_n: 20
    top_workers: 1
    # web_config: /etc/oomwatch/web.yaml
    # state_dir: /var/lib/oomwatch
    # kernel_log: /var/log/kern.log   # only where /dev/kmsg cannot be read; "journal": journalctl -k -f
    # read_code: false                # never read the jobs' training scripts for the code rules
"""

from __future__ import annotations

import math
import reprlib
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import yaml

from oomwatch.agent.serve.http import parse_listen
from oomwatch.engine.yamlsafe import OversizedFile, load_bounded, read_text_limited
from oomwatch.errors import ConfigError

MAX_CONFIG_BYTES = 1 << 20  # the example config is 400 bytes


@dataclass(frozen=True)
class AgentConfig:
    listen: str = ":9797"
    interval: float = 1.0  # seconds between ticks
    pss_budget: float = 0.05  # fraction of one CPU spent reading smaps_rollup
    top_n: int = 20  # per-process series for processes outside training jobs
    top_workers: int = 1  # per-process series per (job, rank, role) of workers, managers, unknown; by USS
    web_config: Path | None = None  # TLS and basic auth (Prometheus exporter-toolkit format)
    state_dir: Path = Path("/var/lib/oomwatch")  # history.db, incidents/, kmsg-position.json
    kernel_log: Path | None = None  # follow this file for OOM reports instead of /dev/kmsg (kern.log)
    # an incident reads the script the job runs (never runs it, never sends it anywhere) for the calls
    # behind each cause (keep_in_memory=True, torch.load without mmap...): false turns it off
    read_code: bool = True


KEYS = {f.name for f in fields(AgentConfig)}


def _shown(value: Any) -> str:
    """A value as said in an error: its repr, cut short (a value may be a long list or string)."""
    return reprlib.repr(value)


def _number(where: str, key: str, value: Any, low: float, high: float, integer: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not isinstance(value, int)):
        kind = "an integer" if integer else "a number"
        raise ConfigError(f"{where}: {key} must be {kind}, not {_shown(value)}")
    # compared as given: an integer of hundreds of digits cannot be made a float
    if (isinstance(value, float) and math.isnan(value)) or not low <= value <= high:
        raise ConfigError(f"{where}: {key} must be between {low:g} and {high:g}, not {_shown(value)}")
    return value


def validate(values: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Check keys and values; return them converted (paths as Path)."""
    unknown = sorted(_shown(k) if not isinstance(k, str) else k for k in set(values) - KEYS)
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
        elif key in ("top_n", "top_workers"):
            out[key] = int(_number(where, key, value, 0, 100_000, integer=True))
        elif key == "read_code":
            if not isinstance(value, bool):
                raise ConfigError(f"{where}: read_code must be true or false, not {_shown(value)}")
            out[key] = value
        elif key in ("web_config", "state_dir", "kernel_log"):
            if not isinstance(value, (str, Path)) or not str(value):
                raise ConfigError(f"{where}: {key} must be a path, not {_shown(value)}")
            if "\0" in str(value):
                raise ConfigError(f"{where}: {key} must be a path, not a string holding a NUL byte")
            out[key] = Path(value)
    return out


def load_config(path: Path | None, flags: Mapping[str, Any]) -> AgentConfig:
    """The file's values (if any), then the flags that were given (not None)."""
    config = AgentConfig()
    if path is not None:
        data = _read(path)
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


def _read(path: Path) -> Any:
    """The file's YAML; every way it cannot be had is a ConfigError naming the file, in one line."""
    try:
        text = read_text_limited(path, MAX_CONFIG_BYTES)
    except IsADirectoryError:
        raise ConfigError(f"cannot read config {path}: it is a directory") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror or exc}") from None
    except OversizedFile as exc:
        raise ConfigError(f"cannot read config {path}: {exc} (a file this big is not a configuration)") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start})") from None
    try:
        return load_bounded(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {_one_line(exc)}") from None
    except RecursionError:  # the loader bounds nesting; this is the last line of defence
        raise ConfigError(f"{path}: not valid YAML: nested too deep") from None


def _one_line(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        return f"line {mark.line + 1}, column {mark.column + 1}: {exc.problem or exc.context}"
    return " ".join(str(exc).split())
