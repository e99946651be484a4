"""Errors a user can cause; the CLI prints them as one line, never a traceback."""

from oomwatch.engine.errors import OomwatchError, RulesError

__all__ = ["ConfigError", "InputError", "OomwatchError", "RulesError"]


class InputError(OomwatchError):
    """An input cannot be read (missing, a directory, no permission, broken gzip)."""


class ConfigError(OomwatchError):
    """The agent's configuration cannot be used (a bad web config file, a listen address that cannot be bound)."""
