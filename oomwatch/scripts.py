"""Read the code that ran, for the engine's code rules (engine.code): the training script a command
line names, and the modules it imports from its own folder. Local and read-only: files are read,
never imported or run, and nothing leaves the machine.

- ``script_of(argv)``: the script of ``python [opts] train.py``, ``python -m pkg.train``,
  ``torchrun [opts] train.py``, ``accelerate launch train.py``, ``deepspeed train.py``...: the first
  argument ending in ``.py``, else a ``-m`` module that is not a launcher's.
- ``read_program(argv, cwd)``: that script (relative to the process's working directory) and up to
  ``MAX_FILES`` files it imports from its folder, two imports deep, at most ``MAX_BYTES`` each.
- ``scripts_named(texts)``: script paths a launcher's log names (``train.py FAILED``, a traceback's
  ``File "/work/train.py"``), for ``oomwatch diagnose``.
"""

from __future__ import annotations

import ast
import os
import re
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path

from oomwatch.engine.model import Program, SourceFile
from oomwatch.engine.roles import LAUNCHER_MODULE_PREFIXES

MAX_FILES = 12
MAX_BYTES = 1 << 20
DEPTH = 2
_NAMED = re.compile(r'(?:^|\s)(?P<path>[\w./~-]+\.py) FAILED\b|File "(?P<tb>[^"<>]+\.py)", line \d+')


def script_of(argv: Sequence[str]) -> tuple[str | None, str | None]:
    """(script path, module) that ``argv`` runs; (None, None) when it names neither."""
    for arg in argv[1:]:
        if arg.endswith(".py") and not arg.startswith("-"):
            return arg, None
    for i, arg in enumerate(argv[:-1]):
        if arg == "-m" and not argv[i + 1].startswith(LAUNCHER_MODULE_PREFIXES):
            return None, argv[i + 1]
    return None, None


def is_file(path: Path) -> bool:
    """Whether ``path`` is a regular file; False, never an error, for a name no file system takes (a log
    names a script with thousands of characters, or a NUL byte, in its path)."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def _read(path: Path) -> str | None:
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            return None
        with open(path, "rb") as f:
            return f.read(MAX_BYTES).decode("utf-8", "replace")
    except (OSError, ValueError):
        return None


def _module_file(root: Path, module: str) -> Path | None:
    base = root.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py", base / "__main__.py"):
        if is_file(candidate):
            return candidate
    return None


def _imports(text: str, here: Path, root: Path) -> list[Path]:
    """Files of ``root``'s tree that ``text`` (a file in ``here``) imports."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    found: list[Path] = []
    for node in ast.walk(tree):
        names: list[tuple[Path, str]] = []
        if isinstance(node, ast.Import):
            names = [(root, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = here if node.level else root
            for _ in range(max(0, node.level - 1)):
                base = base.parent
            if node.module:
                names = [(base, node.module)] + [(base, f"{node.module}.{a.name}") for a in node.names]
            else:
                names = [(base, a.name) for a in node.names]
        for folder, module in names:
            path = _module_file(folder, module)
            if path is not None and root in path.resolve().parents:
                found.append(path)
    return found


def read_program(argv: Sequence[str], cwd: Path | str, extra: Iterable[Path] = ()) -> Program:
    """The code ``argv`` ran from ``cwd`` (plus ``extra`` files), as the engine reads it."""
    cwd = Path(cwd)
    starts: list[Path] = []
    script, module = script_of(argv)
    if script is not None:
        starts.append(Path(os.path.expanduser(script)) if script.startswith("~") else cwd / script)
    elif module is not None and (path := _module_file(cwd, module)) is not None:
        starts.append(path)
    starts.extend(extra)
    files: list[SourceFile] = []
    seen: set[Path] = set()
    queue = [(p, 0) for p in starts]
    while queue and len(files) < MAX_FILES:
        path, depth = queue.pop(0)
        try:
            real = path.resolve()
        except OSError:
            continue
        if real in seen:
            continue
        seen.add(real)
        text = _read(path)
        if text is None:
            continue
        files.append(SourceFile(_shown(path, cwd), text))
        if depth < DEPTH:
            root = real.parent if depth == 0 else _root_of(real, starts)
            queue.extend((p, depth + 1) for p in _imports(text, real.parent, root))
    return Program(tuple(files), tuple(argv) if argv else None)


def _root_of(path: Path, starts: Sequence[Path]) -> Path:
    for s in starts:
        try:
            top = s.resolve().parent
        except OSError:
            continue
        if top in path.parents:
            return top
    return path.parent


def _shown(path: Path, cwd: Path) -> str:
    try:
        return str(path.resolve().relative_to(cwd.resolve()))
    except (ValueError, OSError):
        return str(path)


def scripts_named(texts: Iterable[str]) -> list[str]:
    """Python files a log names as the failed script or in a traceback (not the libraries')."""
    out: list[str] = []
    for text in texts:
        for m in _NAMED.finditer(text):
            path = m.group("path") or m.group("tb")
            if path and "site-packages" not in path and "/lib/python" not in path and path not in out:
                out.append(path)
    return out
