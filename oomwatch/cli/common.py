"""What the commands share: the output formats."""

from __future__ import annotations

FORMATS = ("json", "markdown", "text")
