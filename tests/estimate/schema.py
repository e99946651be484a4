"""The estimate's JSON schema (oomwatch/data/estimate.schema.json), checked on real outputs."""

from __future__ import annotations

import json
from typing import Any

import jsonschema

from tests.conftest import ROOT

SCHEMA = json.loads((ROOT / "oomwatch" / "data" / "estimate.schema.json").read_text())


def valid(doc: dict[str, Any]) -> dict[str, Any]:
    jsonschema.validate(doc, SCHEMA)
    return doc
