"""``oomwatch incidents`` and ``oomwatch incidents show``: the incidents the agent recorded on this node."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from oomwatch.exitcodes import Exit


def _incident_id_or_path(state_dir: Path, ident: str) -> Path:
    from oomwatch.agent.incidents.listing import incident_dir

    direct = Path(ident)
    if direct.suffix == ".json" and direct.is_file():
        return direct
    d = incident_dir(state_dir)
    matches = sorted(d.glob(f"{ident}*.json")) if d.is_dir() else []
    if len(matches) != 1:
        what = "no incident" if not matches else f"{len(matches)} incidents"
        raise click.UsageError(f"{what} matching {ident!r} in {d} (see `oomwatch incidents`)")
    return matches[0]


_state_option = click.option(
    "--state-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("/var/lib/oomwatch"),
    show_default=True, help="The agent's state directory.",
)  # fmt: skip


@click.group("incidents", invoke_without_command=True)
@_state_option
@click.pass_context
def incidents_group(ctx: click.Context, state_dir: Path) -> None:
    """List the OOM incidents the agent recorded on this node (oldest first).

    \b
    Example:
      $ oomwatch incidents
      $ oomwatch incidents show 20261130T014501Z-torchrun-run-1-4242
    """
    ctx.obj = state_dir
    if ctx.invoked_subcommand is not None:
        return
    from oomwatch.agent.incidents.listing import incident_dir, list_incidents
    from oomwatch.render.incident_text import render_incident_list
    from oomwatch.render.layout import output_width
    from oomwatch.textsafe import escape_controls

    if not incident_dir(state_dir).is_dir():
        click.echo(f"oomwatch: no incidents directory in {state_dir} (is the agent running with this --state-dir?)",
                   err=True)  # fmt: skip
        sys.exit(Exit.USAGE)
    skipped: list[str] = []
    width = output_width(sys.stdout)
    docs = list_incidents(state_dir, skipped)
    for line in skipped:
        click.echo(escape_controls(f"oomwatch: skipped {line}"), err=True)
    if not docs:
        click.echo("no incidents")
        return
    click.echo(render_incident_list(docs, width), nl=False)


@incidents_group.command("show")
@click.argument("ident", metavar="ID")
@click.option("--format", "-f", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option(
    "--html",
    "html_path",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    default=None,
    metavar="FILE",
    help="Write the incident as one self-contained HTML page (charts of each process's memory over time, the "
    "limit, the kill; nothing loaded from the network) to FILE instead of printing it. A new FILE is readable "
    "by you only (0600); an existing one keeps its mode.",
)
@click.pass_obj
def incidents_show(state_dir: Path, ident: str, fmt: str, html_path: Path | None) -> None:
    """Show one incident: the diagnosis, the kernel's report and the job's recent history.

    ID is an incident id (or its unique beginning) from `oomwatch incidents`, or the
    path of an incident's .json file. Control characters that processes put in their
    names or output are shown as escapes (\\x1b) in the text; --format json keeps them as data.
    """
    from oomwatch.render.layout import output_width, rewrap
    from oomwatch.textsafe import escape_lines

    path = _incident_id_or_path(state_dir, ident)
    if html_path is not None:
        from oomwatch.agent.incidents.listing import read_incident
        from oomwatch.render.incident_html import render_incident_html
        from oomwatch.sharedfile import write_for_people

        doc, problem = read_incident(path)
        if doc is not None:
            try:
                write_for_people(html_path, render_incident_html(doc))
            except OSError as exc:
                problem = f"cannot write {html_path}: {exc.strerror or exc}"
        if problem is not None:
            click.echo(f"oomwatch: {problem}", err=True)
            sys.exit(Exit.USAGE)
        click.echo(f"wrote {html_path}")
        return
    if fmt == "json":
        click.echo(path.read_text(), nl=False)
        return
    text = path.with_suffix(".txt")
    if text.is_file():  # escaped again: one written by an older agent may hold raw ones
        shown = escape_lines(text.read_bytes().decode("utf-8", "replace"))  # a lone \r is no line break
        click.echo(rewrap(shown, output_width(sys.stdout)), nl=False)  # written at 100 columns
    else:
        doc = json.loads(path.read_text())
        click.echo(json.dumps(doc.get("diagnosis"), indent=2))
