"""The package's shape, for reviews of where code lives (issue 15's before/after figures): modules and lines per
folder, the largest modules, the longest functions, and the modules that spell a verdict's name as a string.

    python tools/house.py [REPO]        (default: this checkout)
"""

from __future__ import annotations

import ast
import json
import sys
from collections import Counter
from pathlib import Path

MODULE_LINES = 400  # the guideline for a module
FUNCTION_LINES = 50  # and for a function


def main(root: Path) -> None:
    package = root / "oomwatch"
    files = sorted(package.rglob("*.py"))
    lines = {p: len(p.read_text(encoding="utf-8").splitlines()) for p in files}
    folders = Counter(p.parent for p in files)
    print("modules per folder (modules, lines):")
    for folder in sorted(folders):
        total = sum(n for p, n in lines.items() if p.parent == folder)
        print(f"  {folder.relative_to(root).as_posix():34} {folders[folder]:3} {total:6}")
    print("largest modules:")
    for p, n in sorted(lines.items(), key=lambda kv: -kv[1])[:10]:
        print(f"  {n:5}  {p.relative_to(root).as_posix()}")
    print(f"  modules over {MODULE_LINES} lines: {sum(1 for n in lines.values() if n > MODULE_LINES)} of {len(lines)}")
    schema = json.loads((package / "data" / "diagnosis.schema.json").read_text(encoding="utf-8"))
    verdicts = set(schema["properties"]["verdict"]["enum"])
    functions: list[tuple[int, str]] = []
    spelled: dict[str, int] = {}
    for p in files:
        tree = ast.parse(p.read_text(encoding="utf-8"), str(p))
        name = p.relative_to(root).as_posix()
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno is not None:
                functions.append((node.end_lineno - node.lineno + 1, f"{name}:{node.name}"))
            elif isinstance(node, ast.Constant) and node.value in verdicts:
                spelled[name] = spelled.get(name, 0) + 1
    functions.sort(reverse=True)
    print("longest functions:")
    for n, where in functions[:8]:
        print(f"  {n:5}  {where}")
    over = sum(1 for n, _ in functions if n > FUNCTION_LINES)
    print(f"  functions over {FUNCTION_LINES} lines: {over} of {len(functions)}")
    print(f"modules spelling a verdict's name ({len(spelled)}):")
    for name, n in sorted(spelled.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  {n:3}  {name}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent)
