"""`oomwatch rules lint|list`: check and list the rules (YAML data)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from oomwatch.errors import OomwatchError
from oomwatch.exitcodes import Exit

if TYPE_CHECKING:
    from oomwatch.engine.rules.ruleset import RuleSet


def _load(rules_dirs: tuple[Path, ...]) -> RuleSet:
    from oomwatch.engine.api import Engine
    from oomwatch.rulecache import load_rules_cached

    return Engine.load(rules_dirs, loader=load_rules_cached).rules


@click.group("rules")
def rules_group() -> None:
    """Inspect and check the rules (fingerprints and verdicts, as YAML data)."""


@rules_group.command("lint")
@click.argument("dirs", nargs=-1, type=click.Path(exists=True, file_okay=False, path_type=Path))
def rules_lint(dirs: tuple[Path, ...]) -> None:
    """Check the built-in rules plus DIRS: every error with file:line, exit 5 if any.

    \b
    Example:
      $ oomwatch rules lint ./my-rules
      ok: 142 fingerprints, 18 verdict rules, 23 event kinds
    """
    from oomwatch.engine.rules.lint import lint
    from oomwatch.engine.rules.loader import load_rules

    rules = load_rules(dirs)
    errors = lint(rules)
    for err in errors:
        click.echo(str(err), err=True)
    if errors:
        click.echo(f"{len(errors)} error(s)", err=True)
        sys.exit(Exit.RULES_INVALID)
    click.echo(
        f"ok: {len(rules.fingerprints)} fingerprints, {len(rules.verdicts)} verdict rules, "
        f"{len(rules.causes)} cause rules, {len(rules.events)} event kinds"
    )


@rules_group.command("list")
@click.option(
    "--rules",
    "rules_dirs",
    multiple=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
)
def rules_list(rules_dirs: tuple[Path, ...]) -> None:
    """List every rule: id, name, event or verdict, status.

    \b
    Example:
      $ oomwatch rules list | grep cuda
    """
    try:
        rules = _load(rules_dirs)
    except OomwatchError as exc:
        click.echo(f"oomwatch: {exc}", err=True)
        sys.exit(Exit.RULES_INVALID)
    for fp in rules.fingerprints:
        click.echo(f"{fp.id}\t{fp.name}\tevent:{fp.event}\t{fp.status}")
    for vr in rules.verdicts:
        click.echo(f"{vr.id}\tverdict\tverdict:{vr.verdict}\t{'confirmed' if vr.confirmed else 'unconfirmed'}")
    for cr in rules.causes:
        kind = "fallback" if cr.fallback else "rule"
        click.echo(f"{cr.id}\tcause\tverdicts:{','.join(cr.verdicts) or 'any'}\t{kind}")
