"""The engine's errors: a user's rules that cannot be loaded. The message is shown as is."""


class OomwatchError(Exception):
    """Base class: the message is shown to the user as is."""


class RulesError(OomwatchError):
    """The rules cannot be loaded."""
