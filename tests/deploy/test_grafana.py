"""The Grafana dashboard (deploy/grafana/oomwatch.json): well formed and importable, every metric and
label its PromQL queries name is one the agent exports, and every expression parses (promtool).

The exported names are read, not listed: a real ``oomwatch agent`` is started and scraped, and the
exporter's collector is fed a synthetic tick with a GPU and one incident, for the families that only
exist with data this machine lacks (GPU memory needs a GPU; the last OOM kill's time needs a kill).

promtool (Debian: apt-get install prometheus) is skipped where it is not installed, except in CI
(CI=true), where that is a failure.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import require_tool
from tests.deploy.promnames import CONDITIONAL, PROMETHEUS_SERIES, exposition_names, promql_names

ROOT = Path(__file__).resolve().parents[2]
GRAFANA = ROOT / "deploy" / "grafana"
DASHBOARD = GRAFANA / "oomwatch.json"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
GRID_COLUMNS = 24


# --------------------------------------------------------------------------- the dashboard


def load() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def all_panels(dash: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, those inside collapsed rows included."""
    for panel in dash.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def variable_query(var: dict[str, Any]) -> str:
    query = var.get("query", "")
    return query.get("query", "") if isinstance(query, dict) else query


# label_values(selector, label) | label_values(label) | query_result(expr) | metrics(re) | label_names()
_LABEL_VALUES = re.compile(r"^\s*label_values\((?:(?P<selector>.+),\s*)?(?P<label>\w+)\s*\)\s*$", re.S)
_QUERY_RESULT = re.compile(r"^\s*query_result\((?P<expr>.+)\)\s*$", re.S)


def queries(dash: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, PromQL expression) of every panel target, template variable and annotation."""
    out = []
    for panel in all_panels(dash):
        for t in panel.get("targets", []):
            out.append((f"panel {panel['id']} {panel['title']!r} target {t.get('refId')}", t.get("expr", "")))
    for var in dash["templating"]["list"]:
        if var["type"] != "query":
            continue
        query = variable_query(var)
        m = _LABEL_VALUES.match(query) or _QUERY_RESULT.match(query)
        assert m, f"variable {var['name']}: a query this test cannot read: {query!r}"
        expr = m.groupdict().get("selector") or m.groupdict().get("expr")
        if expr:
            out.append((f"variable {var['name']}", expr))
    for ann in dash["annotations"]["list"]:
        if "expr" in ann:
            out.append((f"annotation {ann['name']!r}", ann["expr"]))
    return out


def legend_labels(dash: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, label) of every {{label}} in legends and annotation texts, and of annotation tag keys
    and label_values() variables."""
    out = []
    for panel in all_panels(dash):
        for t in panel.get("targets", []):
            for name in re.findall(r"\{\{\s*(\w+)\s*\}\}", t.get("legendFormat", "")):
                out.append((f"panel {panel['id']} legend", name))
    for ann in dash["annotations"]["list"]:
        for key in ("titleFormat", "textFormat"):
            for name in re.findall(r"\{\{\s*(\w+)\s*\}\}", ann.get(key, "")):
                out.append((f"annotation {ann['name']!r} {key}", name))
        out += [(f"annotation {ann['name']!r} tagKeys", k) for k in ann.get("tagKeys", "").split(",") if k]
    for var in dash["templating"]["list"]:
        m = _LABEL_VALUES.match(variable_query(var)) if var["type"] == "query" else None
        if m:
            out.append((f"variable {var['name']}", m.group("label")))
    return out


# --------------------------------------------------------------------------- Grafana's variables

# What Grafana puts in place of its own variables, for promtool: plausible values.
BUILTIN_VALUES = {"__rate_interval": "1m", "__interval": "30s", "__range": "6h", "__range_s": "21600",
                  "__interval_ms": "30000"}  # fmt: skip
# Two ways a multi-value variable reaches a query: some values selected (regex-escaped, in parentheses:
# Grafana writes a "." as "\\." in the query) and "All" (the variable's allValue, or every value).
SELECTIONS = {
    "some": {"instance": r"(node-1:9797|node-2\\.lan:9797)", "training_job": "(pod-1b2c-77|slurm-4242)"},
    "all": {"instance": r"(node-1:9797|node-2\\.lan:9797)", "training_job": ".+"},
}
_VARIABLE = re.compile(
    r"\$\{(?P<braced>[A-Za-z_]\w*)(?::\w+)?\}|\$(?P<plain>[A-Za-z_]\w*)|\[\[(?P<old>[A-Za-z_]\w*)\]\]"
)


def substitute(expr: str, values: dict[str, str]) -> str:
    """``expr`` with Grafana's variables replaced; an unknown variable is an error."""

    def one(m: re.Match[str]) -> str:
        name = m.group("braced") or m.group("plain") or m.group("old")
        if name in values:
            return values[name]
        if name in BUILTIN_VALUES:
            return BUILTIN_VALUES[name]
        raise ValueError(f"unknown variable ${name} in {expr!r}")

    return _VARIABLE.sub(one, expr)


def dashboard_values(dash: dict[str, Any], selection: str) -> dict[str, str]:
    names = {v["name"] for v in dash["templating"]["list"]}
    values = SELECTIONS[selection]
    missing = names - {"datasource"} - set(values)
    assert not missing, f"no example value for the variables {missing}: add them to SELECTIONS"
    return {n: values.get(n, "unused") for n in names}


def dashboard_names(dash: dict[str, Any]) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """([(where, metric)], [(where, label)]) over every expression and legend of the dashboard."""
    values = dashboard_values(dash, "some")
    metrics, labels = [], []
    for where, expr in queries(dash):
        m, labs = promql_names(substitute(expr, values))
        metrics += [(where, name) for name in sorted(m)]
        labels += [(where, name) for name in sorted(labs)]
    return metrics, labels + legend_labels(dash)


def unknown(dash: dict[str, Any], exported: tuple[set[str], set[str]]) -> list[str]:
    names, label_names = exported
    metrics, labels = dashboard_names(dash)
    bad = [f"{where}: metric {name}" for where, name in metrics if name not in names]
    return bad + [f"{where}: label {name}" for where, name in labels if name not in label_names]


def test_dashboard_is_well_formed():
    dash = load()
    assert dash["title"] and dash.get("id") is None  # an id would clash on import
    assert re.fullmatch(r"[A-Za-z0-9_-]{1,40}", dash["uid"])
    uids = [json.loads(p.read_text())["uid"] for p in GRAFANA.glob("*.json")]
    assert uids.count(dash["uid"]) == 1, "two dashboards share a uid"
    assert dash["schemaVersion"] >= 36
    panels = list(all_panels(dash))
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), f"duplicate panel ids: {sorted(i for i in ids if ids.count(i) > 1)}"
    for p in panels:
        pos = p["gridPos"]
        assert set(pos) == {"h", "w", "x", "y"} and all(isinstance(v, int) and v >= 0 for v in pos.values()), p["title"]
        assert pos["w"] >= 1 and pos["h"] >= 1 and pos["x"] + pos["w"] <= GRID_COLUMNS, p["title"]
        assert p.get("title"), p["id"]
        if p["type"] == "row":
            continue
        assert p.get("targets"), f"panel {p['title']!r} has no query"
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), p["title"]
        for t in p["targets"]:
            assert t.get("expr", "").strip(), f"panel {p['title']!r} target {t['refId']} has no expr"


def _overlaps(panels: list[dict[str, Any]]) -> list[tuple[str, str]]:
    out = []
    for i, a in enumerate(panels):
        for b in panels[i + 1 :]:
            pa, pb = a["gridPos"], b["gridPos"]
            if (pa["x"] < pb["x"] + pb["w"] and pb["x"] < pa["x"] + pa["w"]
                    and pa["y"] < pb["y"] + pb["h"] and pb["y"] < pa["y"] + pa["h"]):  # fmt: skip
                out.append((a["title"], b["title"]))
    return out


def test_panels_do_not_overlap():
    dash = load()
    assert _overlaps(dash["panels"]) == []
    for row in dash["panels"]:
        if row["type"] == "row" and row.get("collapsed"):
            inner = row["panels"]
            assert _overlaps(inner) == [], row["title"]
            assert all(p["gridPos"]["y"] > row["gridPos"]["y"] for p in inner), row["title"]
        else:
            assert not row.get("panels"), f"{row['title']!r}: only a collapsed row holds its panels"


def _datasource_refs(node: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "datasource":
                yield path, value
            yield from _datasource_refs(value, f"{path}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _datasource_refs(value, f"{path}/{i}")


def test_every_datasource_is_the_variable():
    dash = load()
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    ds = variables["datasource"]
    assert ds["type"] == "datasource" and ds["query"] == "prometheus"
    builtin = {"type": "grafana", "uid": "-- Grafana --"}
    for path, ref in _datasource_refs(dash):
        assert ref == DATASOURCE or (path.startswith("/annotations") and ref == builtin), f"{path}: {ref!r}"
    for p in all_panels(dash):
        if p["type"] != "row":
            assert p.get("datasource") == DATASOURCE, p["title"]
            assert all(t.get("datasource") == DATASOURCE for t in p["targets"]), p["title"]
    for var in variables.values():
        if var["type"] == "query":
            assert var["datasource"] == DATASOURCE, var["name"]


def test_variables():
    variables = {v["name"]: v for v in load()["templating"]["list"]}
    assert list(variables) == ["datasource", "instance", "training_job"]
    assert variable_query(variables["instance"]) == "label_values(oomwatch_build_info, instance)"
    job = variables["training_job"]
    assert variable_query(job) == 'label_values(oomwatch_process_resident_bytes{instance=~"$instance"}, training_job)'
    assert job["multi"] and job["includeAll"]
    # "All" must not match series without a job (the top-N other processes): .+, not .*
    assert job["allValue"] == ".+"
    assert variables["instance"]["multi"] and variables["instance"]["includeAll"]
    for row in load()["panels"]:
        if row.get("repeat"):
            assert variables[row["repeat"]]["multi"], row["title"]


def test_incident_annotations_use_the_incident_time():
    anns = [a for a in load()["annotations"]["list"] if "oomwatch_incident_timestamp_seconds" in a.get("expr", "")]
    assert anns, "no annotation for the agent's incidents"
    verdicts = set()
    for a in anns:
        # Grafana reads the series value as the time, in milliseconds; the gauge holds unix seconds
        assert a["useValueForTime"] is True, a["name"]
        assert re.search(r"\*\s*1000\s*$", a["expr"]), f"{a['name']}: the value must be turned into milliseconds"
        assert a["enable"] and a["datasource"] == DATASOURCE
        said = a["titleFormat"] + a["textFormat"]
        for label in ("comm", "role", "rank", "cause", "remedy", "incident"):
            assert "{{" + label + "}}" in said, (a["name"], label)
        verdicts.update(re.findall(r"\w+", re.search(r'verdict=~"([^"]+)"', a["expr"]).group(1)))
    assert {"cgroup_oom", "host_oom", "userspace_oom_kill", "sigkill_unexplained"} <= verdicts


# --------------------------------------------------------------------------- the PromQL reader


@pytest.mark.parametrize(
    ("expr", "metrics", "labels"),
    [
        (
            'sum by (instance, rank) (rate(foo_total{a="x{y}", b=~"(.*,)?j(,.*)?"}[5m] offset 1m))\n'
            "/ on (instance) group_left (extra) bar * 1e3 > bool 0x1F",
            {"foo_total", "bar"},
            {"instance", "rank", "a", "b", "extra"},
        ),
        (
            '{__name__="baz", kind="full"} or max_over_time(qux[5m:30s]) unless sum(q) without (le)',
            {"baz", "qux", "q"},
            {"kind", "le"},
        ),
        ('label_replace(up, "dst", "$1", "src", "(.*)") and time() - last_tick < 60', {"up", "last_tick"}, set()),
        (
            'clamp_min(x - x offset 5m, 0) + count_values("v", y) + topk(3, z) / group_left_metric',
            {"x", "y", "z", "group_left_metric"},
            set(),
        ),
        ("SUM BY (job) (m) # sum(comment_metric)\n+ inf", {"m"}, {"job"}),
    ],
)
def test_promql_names(expr, metrics, labels):
    assert promql_names(expr) == (metrics, labels)


@pytest.mark.parametrize("expr", ["sume(x)", "sum(rate(x[5m])", 'x{a="b"', "a) + (b", "x[5m)]", 'x{a="b}'])
def test_promql_names_refuses(expr):
    with pytest.raises(ValueError):
        promql_names(expr)


def test_substitute():
    values = {"instance": "(a|b)", "training_job": ".+"}
    expr = 'rate(x{instance=~"$instance", t=~"(.*,)?${training_job}(,.*)?"}[$__rate_interval]) offset $__interval'
    assert substitute(expr, values) == 'rate(x{instance=~"(a|b)", t=~"(.*,)?.+(,.*)?"}[1m]) offset 30s'
    with pytest.raises(ValueError, match=r"\$nodes"):
        substitute('x{instance=~"$nodes"}', values)


# --------------------------------------------------------------------------- against the agent


def test_every_metric_and_label_is_exported(exported):
    dash = load()
    assert unknown(dash, exported) == []
    metrics, labels = dashboard_names(dash)
    used = {name for _, name in metrics}
    # the dashboard covers each part of the exposition the issue asks for
    for name in ("oomwatch_process_pss_bytes", "oomwatch_process_uss_bytes", "oomwatch_process_anon_bytes",
                 "oomwatch_process_file_bytes", "oomwatch_process_shmem_bytes", "oomwatch_process_swap_bytes",
                 "oomwatch_cgroup_memory_usage_bytes", "oomwatch_cgroup_memory_effective_limit_bytes",
                 "oomwatch_predicted_oom_seconds", "oomwatch_memory_growth_bytes_per_second",
                 "oomwatch_node_memory_available_bytes", "oomwatch_node_memory_pressure_stall_seconds_total",
                 "oomwatch_incident_timestamp_seconds", "oomwatch_oom_kills_total", "oomwatch_collector_success",
                 "oomwatch_tick_duration_seconds", "oomwatch_smaps_spent_seconds_total", "up"):  # fmt: skip
        assert name in used, name


def test_only_gpus_and_incidents_need_the_synthetic_tick(agent_exposition, exported):
    """What the real agent on this machine exports covers the dashboard, but for the families that
    need a GPU or a kill: the synthetic exposition does not stand in for a broken daemon."""
    real, _ = exposition_names(agent_exposition)
    used = {name for _, name in dashboard_names(load())[0]}
    assert used - real - PROMETHEUS_SERIES <= CONDITIONAL


@pytest.mark.parametrize(
    ("where", "good", "bad"),
    [
        ("panel", "oomwatch_process_uss_bytes", "oomwatch_process_uss_byte"),
        ("variable", "oomwatch_build_info", "oomwatch_buildinfo"),
        ("annotation", "oomwatch_incident_timestamp_seconds", "oomwatch_incident_time_seconds"),
        ("panel", 'role="dataloader_worker"', 'rol="dataloader_worker"'),
        ("legend", "{{cgroup}}", "{{c_group}}"),
    ],
)
def test_a_misspelled_name_is_caught(exported, where, good, bad):
    dash = copy.deepcopy(load())
    if where == "panel":
        place = next(t for p in all_panels(dash) for t in p.get("targets", []) if good in t["expr"])
        place["expr"] = place["expr"].replace(good, bad, 1)
    elif where == "legend":
        place = next(t for p in all_panels(dash) for t in p.get("targets", []) if good in t["legendFormat"])
        place["legendFormat"] = place["legendFormat"].replace(good, bad, 1)
    elif where == "variable":
        var = next(v for v in dash["templating"]["list"] if good in json.dumps(v.get("query")))
        var["query"] = json.loads(json.dumps(var["query"]).replace(good, bad))
    else:
        ann = next(a for a in dash["annotations"]["list"] if good in a.get("expr", ""))
        ann["expr"] = ann["expr"].replace(good, bad, 1)
    found = unknown(dash, exported)
    assert len(found) == 1 and found[0].endswith(re.sub(r"[{}]|=.*", "", bad)), found


# --------------------------------------------------------------------------- promtool


def promtool() -> str:
    return require_tool("promtool", "Debian/Ubuntu: apt-get install prometheus")


def test_promtool_parses_every_expression(tmp_path):
    tool = promtool()
    dash = load()
    exprs: dict[str, str] = {}  # expression -> where (each distinct expression once)
    for selection in SELECTIONS:
        values = dashboard_values(dash, selection)
        for where, expr in queries(dash):
            exprs.setdefault(substitute(expr, values), f"{where} ({selection})")
    rules = [{"record": f"oomwatch_dashboard:expr_{i}", "expr": e} for i, e in enumerate(exprs)]
    path = tmp_path / "dashboard.rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "oomwatch-dashboard", "rules": rules}]}, sort_keys=False))
    done = subprocess.run([tool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    index = "\n".join(f"  expr_{i}: {where}" for i, where in enumerate(exprs.values()))
    assert done.returncode == 0, f"{done.stdout}{done.stderr}\nrules:\n{index}"
    assert f"SUCCESS: {len(rules)} rules found" in done.stdout


def test_promtool_would_fail_on_a_broken_expression(tmp_path):
    """The check above can fail: promtool refuses a broken expression in the same kind of file."""
    tool = promtool()
    path = tmp_path / "broken.rules.yaml"
    rules = [{"record": "oomwatch_dashboard:expr_0", "expr": 'sum by (rank (oomwatch_process_pss_bytes{role="rank"})'}]
    path.write_text(yaml.safe_dump({"groups": [{"name": "oomwatch-dashboard", "rules": rules}]}))
    done = subprocess.run([tool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
