"""The `oomwatch` command line: one thin module per command (parse, call one function, render).

`diagnose` and `rules` are imported with this package; the agent's side (`agent`, `top`, `run`,
`history`, `incidents`) only when one of them runs or `--help` lists them: `oomwatch diagnose`
carries nothing of the agent, and the agent and `oomwatch top` nothing of the engine until used.
"""

from __future__ import annotations

import importlib

import click

from oomwatch import __version__
from oomwatch.cli.common import FORMATS
from oomwatch.cli.diagnose import diagnose_cmd
from oomwatch.cli.rules import rules_group

__all__ = ["FORMATS", "LAZY_COMMANDS", "main"]

LAZY_COMMANDS = {
    "agent": ("oomwatch.cli.agent", "agent_cmd"),
    "top": ("oomwatch.cli.agent", "top_cmd"),
    "run": ("oomwatch.cli.agent", "run_cmd"),
    "history": ("oomwatch.cli.history", "history_cmd"),
    "incidents": ("oomwatch.cli.incidents", "incidents_group"),
    "estimate": ("oomwatch.cli.estimate", "estimate_cmd"),
}


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *LAZY_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in LAZY_COMMANDS and cmd_name not in self.commands:
            module, attr = LAZY_COMMANDS[cmd_name]
            self.add_command(getattr(importlib.import_module(module), attr), cmd_name)
        return super().get_command(ctx, cmd_name)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="oomwatch")
def main() -> None:
    """Why did my training job die of memory, and what do I change?

    \b
    Example:
      oomwatch diagnose train.log dmesg.txt
    """


main.add_command(diagnose_cmd)
main.add_command(rules_group)
