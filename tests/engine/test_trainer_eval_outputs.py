"""An HF Trainer whose evaluate() keeps every eval batch's full logits on the host (compute_metrics without
preprocess_logits_for_metrics): read from the script that ran (rules/code.yaml trainer_eval_outputs), it names
the accumulation on a real cgroup kill (tests/fixtures/variants/gpt2_trainer_ddp, captured with the scenario
runner), where the logs alone show two ranks of the same size and nothing more."""

from __future__ import annotations

import json

from tests.conftest import FIXTURES, ROOT, run_oomwatch

RUN = FIXTURES / "variants" / "gpt2_trainer_ddp"


def _diagnose(flags: str = "") -> dict:
    """diagnose on the run's console and kernel report, with the command that ran (plus ``flags``)."""
    meta = json.loads((RUN / "meta.json").read_text())
    logs = (str(RUN / "console.txt"), str(RUN / "kmsg.txt"))
    done = run_oomwatch("diagnose", "-f", "json", *logs, "--command", meta["command"] + flags, cwd=ROOT)
    assert done.returncode == 3, done.stderr.decode()
    return json.loads(done.stdout)


def test_the_trainer_keeping_eval_logits_is_named_from_its_script():
    diag = _diagnose()
    assert diag["verdict"] == "cgroup_oom" and diag["cause_determined"]
    top = diag["causes"][0]
    assert top["id"] == "unbounded_cache", [(c["id"], c["confidence"]) for c in diag["causes"]]
    lines = [e["text"] for e in top["evidence"]]
    assert any("trainer = Trainer(" in t for t in lines), lines


def test_with_preprocess_logits_for_metrics_given_it_is_not_said():
    # --v2 passes preprocess_logits_for_metrics=argmax_logits (a function of the script): nothing kept whole
    diag = _diagnose(" --v2")
    assert not diag["cause_determined"]
    assert all("Trainer(" not in e["text"] for c in diag["causes"] for e in c["evidence"])
