"""Which part of oomwatch may import which: read from every module's own import statements (at the
top and inside functions), never by importing it.

* `oomwatch.engine` is the pure core: it imports nothing of oomwatch outside it;
* its rules model (`oomwatch.engine.rules`) imports only itself and the engine's leaf modules (the
  bounded readers, the verdict table), except `lint`, which runs examples through the scanner's pieces;
* the verdict table (`oomwatch.engine.verdicts`) imports nothing of oomwatch: exitcodes, the renderers
  and the agent read it;
* the agent and the kernel-file readers (`procfs`, `cgroupfs`) import no command line (`oomwatch.cli`);
* nothing but the command line itself imports the command line;
* `oomwatch.render` (every output) imports no agent room that does I/O (sample, watch, incidents, history,
  serve) and no command line: it takes values and returns text.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "oomwatch"


def _module(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    here = _module(path).split(".")
    if path.name != "__init__.py":
        here = here[:-1]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the module's package
                base = here[: len(here) - node.level + 1]
                found.add(".".join([*base, node.module] if node.module else base))
            elif node.module:
                found.add(node.module)
                found.update(f"{node.module}.{a.name}" for a in node.names)
    return {m for m in found if m == "oomwatch" or m.startswith("oomwatch.")}


MODULES = {_module(p): _imports(p) for p in sorted(PACKAGE.rglob("*.py"))}


def _under(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_modules_were_read() -> None:
    assert "oomwatch.engine.scanner" in MODULES and "oomwatch.cli.diagnose" in MODULES
    assert "oomwatch.engine.rules.loader" in MODULES["oomwatch.engine.api"]


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _under(m, "oomwatch.engine")))
def test_the_engine_imports_only_the_engine(module: str) -> None:
    outside = sorted(m for m in MODULES[module] if not _under(m, "oomwatch.engine") and m != "oomwatch")
    assert not outside, f"{module} imports {outside}"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if not _under(m, "oomwatch.cli")))
def test_only_the_command_line_imports_the_command_line(module: str) -> None:
    cli = sorted(m for m in MODULES[module] if _under(m, "oomwatch.cli"))
    assert not cli or module == "oomwatch.__main__", f"{module} imports {cli}"


AGENT_IO_ROOMS = ("sample", "watch", "incidents", "history", "serve")


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _under(m, "oomwatch.render")))
def test_render_imports_no_agent_room_doing_io_and_no_command_line(module: str) -> None:
    banned = ["oomwatch.cli", *(f"oomwatch.agent.{room}" for room in AGENT_IO_ROOMS)]
    found = sorted(m for m in MODULES[module] if any(_under(m, b) for b in banned))
    assert not found, f"{module} imports {found}"


KERNEL_FILES = {"oomwatch.procfs": ("oomwatch.procfs",), "oomwatch.cgroupfs": ("oomwatch.cgroupfs", "oomwatch.procfs")}


@pytest.mark.parametrize("module", sorted(m for m in MODULES if any(_under(m, package) for package in KERNEL_FILES)))
def test_the_kernel_file_readers_import_only_kernel_file_readers(module: str) -> None:
    """procfs reads /proc (and /dev/kmsg) with nothing but ``oomwatch.paths``; cgroupfs adds procfs: every
    other part reads the kernel's files through them, never the other way round."""
    package = next(p for p in KERNEL_FILES if _under(module, p))
    allowed = (*KERNEL_FILES[package], "oomwatch.paths")
    outside = sorted(m for m in MODULES[module] if m != "oomwatch" and not any(_under(m, a) for a in allowed))
    assert not outside, f"{module} imports {outside}"


RULES_MAY_USE = (
    "oomwatch.engine.rules",
    "oomwatch.engine.readlimit",
    "oomwatch.engine.yamlsafe",
    "oomwatch.engine.verdicts",
)


@pytest.mark.parametrize(
    "module", sorted(m for m in MODULES if _under(m, "oomwatch.engine.rules") and m != "oomwatch.engine.rules.lint")
)
def test_the_rules_model_imports_only_itself_and_leaf_modules(module: str) -> None:
    outside = sorted(m for m in MODULES[module] if not any(_under(m, p) for p in RULES_MAY_USE) and m != "oomwatch")
    assert not outside, f"{module} imports {outside}"


def test_the_verdict_table_is_a_leaf() -> None:
    assert "oomwatch.engine.verdicts" in MODULES
    assert not MODULES["oomwatch.engine.verdicts"]


# The agent's rooms and the other rooms (and top-level agent modules) each may use: a map for a newcomer,
# and no cycle between rooms (a room's tests can import it without the rooms that use it).
AGENT_ROOMS = {
    "sample": {"tick"},
    "watch": {"atomic"},
    "analyze": {"tick"},
    "history": {"analyze", "sample", "tick"},
    "incidents": {"analyze", "atomic", "history", "sample", "tick", "watch"},
    "serve": {"analyze", "incidents", "tick"},
}


@pytest.mark.parametrize("room", sorted(AGENT_ROOMS))
def test_each_agent_room_uses_only_the_rooms_it_declares(room: str) -> None:
    used = set()
    for module, imports in MODULES.items():
        if _under(module, f"oomwatch.agent.{room}"):
            used |= {
                m.split(".")[2]
                for m in imports
                if _under(m, "oomwatch.agent") and m.count(".") >= 2 and not _under(m, f"oomwatch.agent.{room}")
            }
    assert used <= AGENT_ROOMS[room], f"agent.{room} uses {sorted(used - AGENT_ROOMS[room])}"


def test_the_agent_rooms_form_no_cycle() -> None:
    seen: dict[str, int] = {}  # 1 on the path, 2 done

    def visit(room: str, path: tuple[str, ...]) -> None:
        if seen.get(room) == 2:
            return
        assert seen.get(room) != 1, f"a cycle: {' -> '.join((*path, room))}"
        seen[room] = 1
        for other in AGENT_ROOMS[room] & AGENT_ROOMS.keys():
            visit(other, (*path, room))
        seen[room] = 2

    for room in AGENT_ROOMS:
        visit(room, ())


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _under(m, "oomwatch.estimate")))
def test_the_estimator_imports_only_itself_and_the_engine(module: str) -> None:
    allowed = ("oomwatch.estimate", "oomwatch.engine")
    outside = sorted(m for m in MODULES[module] if m != "oomwatch" and not any(_under(m, a) for a in allowed))
    assert not outside, f"{module} imports {outside}"
