"""The Kubernetes manifests (deploy/kubernetes/): what the agent's pod must have, checked against the
agent's real command line, the systemd unit's capability set and the alert rules; the built-in
kinds validated against the Kubernetes OpenAPI schemas (kubernetes-validate, strict: unknown fields
are errors), and the kustomizations built with `kubectl kustomize`, both offline.

kubernetes-validate and kubectl are skipped where they are missing, except in CI (CI=true), where
that is a failure. The PodMonitor is a CRD: no schema ships for it, so it is checked field by field.
"""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from oomwatch import __version__
from oomwatch.agent.config import load_config
from tests.conftest import ROOT, skip_or_fail

KDIR = ROOT / "deploy" / "kubernetes"
DAEMONSET_FILE = KDIR / "daemonset.yaml"
PODMONITOR_FILE = KDIR / "podmonitor.yaml"
KUSTOMIZATION = KDIR / "kustomization.yaml"
UNIT = ROOT / "deploy" / "systemd" / "oomwatch.service"
RULES = ROOT / "deploy" / "prometheus" / "oomwatch.rules.yaml"

NAMESPACE = "oomwatch"
PORT = 9797
STATE_DIR = "/var/lib/oomwatch"
FOOTPRINT = 53 * 1024 * 1024  # measured VmHWM of the agent watching 1000 processes
# recursiveReadOnly (the host cgroup mount) is in the API from 1.30: the oldest version supported
OLDEST_KUBERNETES = (1, 30)
BUILTIN_KINDS = {
    ("v1", "Namespace"),
    ("v1", "ServiceAccount"),
    ("v1", "ResourceQuota"),
    ("apps/v1", "DaemonSet"),
}
PODMONITOR = ("monitoring.coreos.com/v1", "PodMonitor")

# Lines of kustomization.yaml that the README tells the user to uncomment.
PODMONITOR_LINE = "  # - podmonitor.yaml\n"
COMPONENT_LINES = "# components:\n#   - privileged\n"


# --------------------------------------------------------------------------- helpers


def missing(reason: str) -> None:
    skip_or_fail(reason, "the Kubernetes manifests must be checked in CI")


def load_docs(path: Path) -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    for d in docs:
        assert isinstance(d, dict), f"{path.name}: a document that is not a mapping: {d!r}"
    return docs


def only(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [d for d in docs if d.get("kind") == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def pod_spec(ds: dict[str, Any]) -> dict[str, Any]:
    return ds["spec"]["template"]["spec"]


def agent_container(ds: dict[str, Any]) -> dict[str, Any]:
    containers = pod_spec(ds)["containers"]
    assert [c["name"] for c in containers] == ["agent"]
    return containers[0]


def flag_values(args: list[str]) -> dict[str, str]:
    """``--flag=value`` and ``--flag value`` arguments as {flag: value}."""
    out: dict[str, str] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        assert arg.startswith("--"), f"not a flag: {arg!r} in {args}"
        if "=" in arg:
            flag, value = arg.split("=", 1)
        else:
            flag, value = arg, args[i + 1]
            i += 1
        assert flag not in out, f"{flag} given twice"
        out[flag] = value
        i += 1
    return out


def listen_port(listen: str) -> int:
    return int(listen.rsplit(":", 1)[1])


def mounts_by_path(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["mountPath"]: m for m in container.get("volumeMounts", [])}


def volumes_by_name(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in spec.get("volumes", [])}


_SUFFIXES = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "k": 10**3, "M": 10**6, "G": 10**9, "m": 1e-3, "": 1}


def parse_quantity(q: str | int) -> float:
    """A Kubernetes quantity ("64Mi", "500m", "1") as a number of bytes or cores."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|k|M|G|m|)", str(q))
    assert m, f"not a quantity this test knows: {q!r}"
    return float(m.group(1)) * _SUFFIXES[m.group(2)]


def systemd_capabilities() -> set[str]:
    m = re.search(r"^CapabilityBoundingSet=(.*)$", UNIT.read_text(), re.M)
    assert m, f"no CapabilityBoundingSet= in {UNIT}"
    return {c.removeprefix("CAP_") for c in m.group(1).split()}


def kubectl() -> str:
    path = shutil.which("kubectl")
    if path is None:
        missing("kubectl not found (it builds the kustomization offline: `kubectl kustomize`)")
    assert path is not None
    return path


def kustomize(directory: Path) -> list[dict[str, Any]]:
    done = subprocess.run(
        [kubectl(), "kustomize", str(directory)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, f"kubectl kustomize {directory} failed:\n{done.stderr}"
    return [d for d in yaml.safe_load_all(done.stdout) if d is not None]


def variant(tmp_path: Path, *, podmonitor: bool, privileged: bool) -> Path:
    """A copy of deploy/kubernetes with the README's lines of kustomization.yaml uncommented."""
    copy_dir = tmp_path / "kubernetes"
    shutil.copytree(KDIR, copy_dir)
    text = (copy_dir / "kustomization.yaml").read_text()
    if podmonitor:
        assert text.count(PODMONITOR_LINE) == 1, f"kustomization.yaml lost the line {PODMONITOR_LINE!r}"
        text = text.replace(PODMONITOR_LINE, PODMONITOR_LINE.replace("# ", "", 1))
    if privileged:
        assert text.count(COMPONENT_LINES) == 1, f"kustomization.yaml lost the lines {COMPONENT_LINES!r}"
        text = text.replace(COMPONENT_LINES, "components:\n  - privileged\n")
    (copy_dir / "kustomization.yaml").write_text(text)
    return copy_dir


def kubernetes_validate():  # type: ignore[no-untyped-def]
    try:
        from kubernetes_validate import utils
    except ImportError:
        missing("kubernetes-validate is not installed (pip install '.[test]')")
    return utils


def schema_versions(utils) -> list[str]:  # type: ignore[no-untyped-def]
    """Every Kubernetes version kubernetes-validate has schemas for, from the oldest supported on."""
    versions = sorted(
        {v for v in utils.all_versions() if tuple(map(int, v.split(".")[:2])) >= OLDEST_KUBERNETES},
        key=lambda v: tuple(map(int, v.split("."))),
    )
    assert versions, f"kubernetes-validate has no schemas for {OLDEST_KUBERNETES} or newer"
    return versions


def validate_builtin(docs: list[dict[str, Any]]) -> list[str]:
    """Validate every built-in kind strictly against every schema version; the errors, in words."""
    utils = kubernetes_validate()
    errors = []
    for version in schema_versions(utils):
        for doc in docs:
            if (doc["apiVersion"], doc["kind"]) == PODMONITOR:
                continue
            try:
                utils.validate(doc, version, strict=True)
            except utils.ValidationError as exc:
                where = ".".join(str(p) for p in exc.path)
                errors.append(f"{doc['kind']}/{doc['metadata']['name']} against {version}: {where}: {exc.message}")
    return errors


@pytest.fixture(scope="module")
def docs() -> list[dict[str, Any]]:
    return load_docs(DAEMONSET_FILE)


@pytest.fixture(scope="module")
def ds(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return only(docs, "DaemonSet")


@pytest.fixture(scope="module")
def args(ds: dict[str, Any]) -> dict[str, str]:
    return flag_values(agent_container(ds)["args"])


@pytest.fixture(scope="module")
def agent_help() -> str:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-m", "oomwatch", "agent", "--help"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


# --------------------------------------------------------------------------- the documents


def test_every_document_parses_with_a_known_kind(docs: list[dict[str, Any]]) -> None:
    kinds = {(d["apiVersion"], d["kind"]) for d in docs}
    assert kinds == BUILTIN_KINDS
    assert len(docs) == len(BUILTIN_KINDS)
    for d in docs:
        assert d["metadata"]["name"] == "oomwatch" or d["kind"] == "ResourceQuota"
        if d["kind"] != "Namespace":
            assert d["metadata"]["namespace"] == NAMESPACE, d["kind"]
    pm = load_docs(PODMONITOR_FILE)
    assert [(d["apiVersion"], d["kind"]) for d in pm] == [PODMONITOR]
    assert pm[0]["metadata"]["namespace"] == NAMESPACE


def test_the_namespace_admits_the_pod(docs: list[dict[str, Any]]) -> None:
    """hostPID, hostNetwork, hostPath and the added capabilities are all outside the baseline Pod
    Security Standard: a namespace enforcing anything stricter than privileged refuses the pods."""
    labels = only(docs, "Namespace")["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"


def test_critical_priority_is_admitted_by_quota(docs: list[dict[str, Any]], ds: dict[str, Any]) -> None:
    quota = only(docs, "ResourceQuota")
    (expr,) = quota["spec"]["scopeSelector"]["matchExpressions"]
    assert expr["scopeName"] == "PriorityClass" and expr["operator"] == "In"
    assert pod_spec(ds)["priorityClassName"] in expr["values"]


def test_kustomization_lists_the_daemonset_only() -> None:
    k = yaml.safe_load(KUSTOMIZATION.read_text())
    assert k["kind"] == "Kustomization"
    assert k["resources"] == ["daemonset.yaml"]
    assert "components" not in k  # the privileged component is opt-in
    text = KUSTOMIZATION.read_text()
    assert PODMONITOR_LINE in text and COMPONENT_LINES in text  # the README's instructions
    component = yaml.safe_load((KDIR / "privileged" / "kustomization.yaml").read_text())
    assert component["kind"] == "Component"


# --------------------------------------------------------------------------- the pod


def test_pod_lives_in_the_hosts_namespaces(docs: list[dict[str, Any]], ds: dict[str, Any]) -> None:
    spec = pod_spec(ds)
    assert spec["hostPID"] is True  # every pod's processes
    assert spec["hostNetwork"] is True  # the process connector exists only in the host's netns
    assert not spec.get("hostIPC")
    assert spec["priorityClassName"] == "system-node-critical"
    assert spec["serviceAccountName"] == "oomwatch"
    # the agent never talks to the API server
    assert spec["automountServiceAccountToken"] is False
    assert only(docs, "ServiceAccount")["automountServiceAccountToken"] is False


def test_runs_on_every_node(ds: dict[str, Any]) -> None:
    tolerations = pod_spec(ds)["tolerations"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in tolerations
    assert {"operator": "Exists"} in tolerations  # every taint
    assert "nodeSelector" not in pod_spec(ds)
    strategy = ds["spec"]["updateStrategy"]
    assert strategy["type"] == "RollingUpdate"
    assert strategy["rollingUpdate"]["maxUnavailable"] == "10%"
    # two agents on a node would fight over the node's port and the same history.db
    assert strategy["rollingUpdate"]["maxSurge"] == 0


def test_root_with_only_the_documented_capabilities(ds: dict[str, Any]) -> None:
    spec = pod_spec(ds)
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    # An explicit AppArmor profile other than Unconfined makes the kubelet refuse the pod on nodes
    # without AppArmor (RHEL, Amazon Linux): the runtime's default applies where AppArmor exists.
    assert "appArmorProfile" not in spec["securityContext"]
    for c in spec["containers"] + spec.get("initContainers", []):
        sc = c["securityContext"]
        assert sc["runAsUser"] == 0 and sc["runAsNonRoot"] is False, c["name"]
        assert sc["privileged"] is False, c["name"]
        assert sc["allowPrivilegeEscalation"] is False, c["name"]
        assert sc["readOnlyRootFilesystem"] is True, c["name"]
        assert sc["capabilities"]["drop"] == ["ALL"], c["name"]
        assert "seccompProfile" not in sc and "appArmorProfile" not in sc, c["name"]
    (agent,) = spec["containers"]
    add = agent["securityContext"]["capabilities"]["add"]
    assert len(add) == len(set(add))
    # the set the systemd unit documents and keeps, and nothing more (NET_ADMIN is opt-in there too)
    assert set(add) == systemd_capabilities() == {"SYS_PTRACE", "DAC_READ_SEARCH", "SYSLOG"}
    assert "# - NET_ADMIN" in DAEMONSET_FILE.read_text()
    for c in spec.get("initContainers", []):
        assert "add" not in c["securityContext"]["capabilities"], c["name"]


def test_host_mounts_are_read_only(ds: dict[str, Any], args: dict[str, str]) -> None:
    spec = pod_spec(ds)
    (agent,) = spec["containers"]
    volumes = volumes_by_name(spec)
    mounts = mounts_by_path(agent)
    for m in agent["volumeMounts"] + [m for c in spec.get("initContainers", []) for m in c["volumeMounts"]]:
        assert m["name"] in volumes, f"mount of an undefined volume {m['name']}"
    assert {m["name"] for m in agent["volumeMounts"]} == set(volumes), "a volume the agent does not mount"

    # /proc: with hostPID the container's own /proc is the host's PID namespace, so no --proc and
    # no hostPath; should --proc ever be given, it must be the host's /proc, mounted read-only.
    if "--proc" in args:
        m = mounts[args["--proc"]]
        assert volumes[m["name"]]["hostPath"]["path"] == "/proc" and m["readOnly"] is True
    else:
        assert spec["hostPID"] is True
        assert not any(v.get("hostPath", {}).get("path") == "/proc" for v in volumes.values())

    # /sys: the agent reads cgroups under SYS/fs/cgroup; that is all of the host's /sys it gets
    assert "--sys" in args, "the agent is not told where the host's cgroups are mounted"
    cgroup = mounts[args["--sys"] + "/fs/cgroup"]
    assert volumes[cgroup["name"]]["hostPath"] == {"path": "/sys/fs/cgroup", "type": "Directory"}
    assert cgroup.get("readOnly") is True
    # cgroup v1: one filesystem per controller below it, writable unless read-only is recursive
    assert cgroup["recursiveReadOnly"] in ("IfPossible", "Enabled")

    kmsg = mounts["/dev/kmsg"]
    assert volumes[kmsg["name"]]["hostPath"] == {"path": "/dev/kmsg", "type": "CharDevice"}
    assert kmsg.get("readOnly") is True

    state = mounts[args["--state-dir"]]
    assert args["--state-dir"] == STATE_DIR  # where `oomwatch incidents` and `history` look by default
    assert volumes[state["name"]]["hostPath"] == {"path": STATE_DIR, "type": "DirectoryOrCreate"}
    assert not state.get("readOnly")

    assert "emptyDir" in volumes[mounts["/tmp"]["name"]]

    # every host path but the state directory is read-only
    for m in agent["volumeMounts"]:
        if "hostPath" in volumes[m["name"]] and m["mountPath"] != STATE_DIR:
            assert m.get("readOnly") is True, m["mountPath"]


def test_state_dir_is_closed_to_other_users(ds: dict[str, Any]) -> None:
    (init,) = pod_spec(ds)["initContainers"]
    assert init["image"] == agent_container(ds)["image"]
    assert "0o700" in " ".join(init["command"]) and STATE_DIR in " ".join(init["command"])
    assert mounts_by_path(init)[STATE_DIR]["name"] == mounts_by_path(agent_container(ds))[STATE_DIR]["name"]


def test_resources_match_the_measured_footprint(ds: dict[str, Any]) -> None:
    spec = pod_spec(ds)
    res = agent_container(ds)["resources"]
    assert parse_quantity(res["requests"]["memory"]) >= FOOTPRINT
    assert parse_quantity(res["limits"]["memory"]) == 256 * 1024 * 1024
    m = re.search(r"^MemoryMax=(\d+)M$", UNIT.read_text(), re.M)  # systemd's M is 1024 * 1024
    assert m and parse_quantity(res["limits"]["memory"]) == int(m.group(1)) * 1024 * 1024
    assert parse_quantity(res["requests"]["cpu"]) == pytest.approx(0.05)
    assert parse_quantity(res["limits"]["cpu"]) == pytest.approx(0.5)
    for c in spec.get("initContainers", []):
        assert {"cpu", "memory"} <= set(c["resources"]["limits"]), c["name"]
    assert 0 < spec["terminationGracePeriodSeconds"] <= 60


def test_image_is_this_version(ds: dict[str, Any]) -> None:
    assert agent_container(ds)["image"] == f"oomwatch:{__version__}"
    assert agent_container(ds)["command"] == ["oomwatch", "agent"]


# --------------------------------------------------------------------------- the port and its users


def test_one_port_everywhere(ds: dict[str, Any], args: dict[str, str]) -> None:
    agent = agent_container(ds)
    (port,) = agent["ports"]
    assert port["name"] == "metrics" and port["protocol"] == "TCP"
    assert listen_port(args["--listen"]) == port["containerPort"] == PORT
    assert port["hostPort"] == port["containerPort"]  # hostNetwork: the API requires them equal
    annotations = ds["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert int(annotations["prometheus.io/port"]) == port["containerPort"]
    assert annotations["prometheus.io/path"] == "/metrics"
    for probe in ("livenessProbe", "readinessProbe"):
        get = agent[probe]["httpGet"]
        assert get["path"] == "/metrics", probe
        assert get["port"] in (port["name"], port["containerPort"]), probe
        assert get.get("scheme", "HTTP") == "HTTP", probe  # no --web-config: plain HTTP


def test_args_are_the_agents_real_flags(ds: dict[str, Any], args: dict[str, str], agent_help: str) -> None:
    known = set(re.findall(r"^\s+(--[a-z][a-z-]*)", agent_help, re.M))
    assert {"--listen", "--state-dir", "--sys", "--proc"} <= known, "cannot read the flags from --help"
    unknown = set(args) - known
    assert not unknown, f"flags that `oomwatch agent --help` does not list: {sorted(unknown)}"
    # ...and the values parse as the agent parses them
    from oomwatch.cli.agent import agent_cmd

    ctx = agent_cmd.make_context("agent", list(agent_container(ds)["args"]))
    config = load_config(None, {k: ctx.params[k] for k in ("listen", "state_dir")})
    assert config.listen == args["--listen"]
    assert str(config.state_dir) == STATE_DIR
    assert str(ctx.params["sys_root"]) == args["--sys"]


def test_podmonitor_selects_the_agents(ds: dict[str, Any]) -> None:
    (pm,) = load_docs(PODMONITOR_FILE)
    spec = pm["spec"]
    # what is checked structurally, since no schema ships for the CRD: only known fields
    assert set(spec) <= {"jobLabel", "namespaceSelector", "selector", "podMetricsEndpoints", "podTargetLabels"}
    pod_labels = ds["spec"]["template"]["metadata"]["labels"]
    assert spec["selector"]["matchLabels"].items() <= pod_labels.items()
    assert spec["namespaceSelector"]["matchNames"] == [ds["metadata"]["namespace"]]
    (endpoint,) = spec["podMetricsEndpoints"]
    assert set(endpoint) <= {"port", "path", "interval", "scrapeTimeout", "scheme", "relabelings"}
    assert endpoint["port"] == agent_container(ds)["ports"][0]["name"]
    assert endpoint["path"] == "/metrics"
    assert {
        "sourceLabels": ["__meta_kubernetes_pod_node_name"],
        "targetLabel": "instance",
        "action": "replace",
    } in endpoint["relabelings"]
    # the job label is the value of a pod label, and the alert rules' up{job=...} is that value
    jobs = set(re.findall(r'up\{job="([^"]+)"\}', RULES.read_text()))
    assert jobs == {pod_labels[spec["jobLabel"]]}


# --------------------------------------------------------------------------- schemas and kustomize


def test_builtin_kinds_match_the_kubernetes_schemas(docs: list[dict[str, Any]]) -> None:
    errors = validate_builtin(docs)
    assert not errors, "\n".join(errors)


def test_the_schema_check_can_fail(ds: dict[str, Any]) -> None:
    """A misspelt field (strict: unknown fields are errors) and a wrong type are caught; the CRD has
    no schema there (hence the structural check above)."""
    utils = kubernetes_validate()
    typo = copy.deepcopy(ds)
    sc = agent_container(typo)["securityContext"]
    sc["readOnlyRootFileSystem"] = sc.pop("readOnlyRootFilesystem")
    wrong_type = copy.deepcopy(ds)
    pod_spec(wrong_type)["hostPID"] = "yes"
    for bad in (typo, wrong_type):
        assert validate_builtin([bad]), "kubernetes-validate accepted a broken DaemonSet"
    (pm,) = load_docs(PODMONITOR_FILE)
    with pytest.raises(utils.SchemaNotFoundError):
        utils.validate(pm, schema_versions(utils)[-1], strict=True)


def privileged_with_no_escalation(docs: list[dict[str, Any]]) -> list[str]:
    """The API refuses privileged: true with allowPrivilegeEscalation: false (not in the schema)."""
    bad = []
    for d in docs:
        if d["kind"] != "DaemonSet":
            continue
        for c in pod_spec(d)["containers"] + pod_spec(d).get("initContainers", []):
            sc = c.get("securityContext", {})
            if sc.get("privileged") and sc.get("allowPrivilegeEscalation") is False:
                bad.append(c["name"])
    return bad


def test_kustomize_builds_the_default(docs: list[dict[str, Any]]) -> None:
    built = kustomize(KDIR)
    assert sorted((d["apiVersion"], d["kind"]) for d in built) == sorted(BUILTIN_KINDS)
    assert only(built, "DaemonSet") == only(docs, "DaemonSet")


def test_kustomize_builds_the_documented_variants(tmp_path: Path) -> None:
    built = kustomize(variant(tmp_path, podmonitor=True, privileged=True))
    assert sorted((d["apiVersion"], d["kind"]) for d in built) == sorted(BUILTIN_KINDS | {PODMONITOR})
    agent = agent_container(only(built, "DaemonSet"))
    assert agent["securityContext"]["privileged"] is True
    assert agent["securityContext"]["readOnlyRootFilesystem"] is True
    assert not privileged_with_no_escalation(built)
    errors = validate_builtin(built)
    assert not errors, "\n".join(errors)


def test_privileged_needs_escalation_allowed(ds: dict[str, Any]) -> None:
    bad = copy.deepcopy(ds)
    agent_container(bad)["securityContext"]["privileged"] = True
    assert privileged_with_no_escalation([bad]) == ["agent"]
    assert not privileged_with_no_escalation([ds])
