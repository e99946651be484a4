"""The second family of reproductions: each cause written as different users write it (HF Trainer,
Lightning, accelerate, plain ``mp.spawn``, torchrun, a bare script with workers; logging by print,
``logging``, tqdm only, or nothing), each with a fixed twin that survives the same limit.

Workloads are under ``scenarios/workloads/variants/``. None prints the name of its mechanism or a
configuration naming it: they print what a user's script prints.
"""

from __future__ import annotations

from scenarios.catalog import Scenario

VARIANTS: dict[str, Scenario] = {}
