"""Errors a user can cause; the CLI prints them as one line, never a traceback."""


class OomwatchError(Exception):
    """Base class: the message is shown to the user as is."""


class InputError(OomwatchError):
    """An input cannot be read (missing, a directory, no permission, broken gzip)."""


class RulesError(OomwatchError):
    """The rules cannot be loaded."""


class ConfigError(OomwatchError):
    """The agent's configuration cannot be used (a bad web config file, a listen address that cannot be bound)."""
