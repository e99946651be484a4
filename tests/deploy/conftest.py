"""Fixtures of the deploy tests: what the agent exports (see promnames.py)."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.agent.agentproc import AgentProcess, wait_ticks
from tests.deploy.promnames import (
    CONDITIONAL,
    PROMETHEUS_SERIES,
    TARGET_LABELS,
    exposition_names,
    synthetic_exposition,
)


@pytest.fixture(scope="module")
def agent_exposition() -> str:
    agent = AgentProcess("--listen", "127.0.0.1:0", "--interval", "0.2")
    try:
        wait_ticks(agent, 2)
        return agent.scrape()
    finally:
        agent.stop()


@pytest.fixture(scope="module")
def exported(agent_exposition: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[set[str], set[str]]:
    synthetic = synthetic_exposition(tmp_path_factory.mktemp("state"))
    real_names, real_labels = exposition_names(agent_exposition)
    names, labels = exposition_names(synthetic)
    # the synthetic tick must show what it is there for, else the union below proves nothing
    assert not CONDITIONAL - names, CONDITIONAL - names
    assert "oomwatch_incident_timestamp_seconds" in {
        s.name for f in text_string_to_metric_families(synthetic) for s in f.samples
    }, "the synthetic incident is not exported"
    return real_names | names | PROMETHEUS_SERIES, real_labels | labels | TARGET_LABELS


# --------------------------------------------------------------------------- structure
