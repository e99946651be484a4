"""The agent's log formatter (apart from oomwatch.textsafe, so that `diagnose` needs no `logging`)."""

from __future__ import annotations

import logging
from typing import Any

from oomwatch.textsafe import escape_controls, escape_lines


class EscapingFormatter(logging.Formatter):
    """A log formatter for the agent: a message says what a job or process named itself (its comm,
    run id, cgroup, output), and must not forge a log line of its own or reach the terminal as an
    escape sequence. The message is escaped whole; a traceback keeps its lines, each escaped."""

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        record.message = escape_controls(record.message)
        return super().formatMessage(record)

    def formatException(self, ei: Any) -> str:  # noqa: N802 - logging's name
        return escape_lines(super().formatException(ei))

    def formatStack(self, stack_info: str) -> str:  # noqa: N802 - logging's name
        return escape_lines(super().formatStack(stack_info))
