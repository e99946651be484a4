"""What the code that ran says a value is, when it can be known (pure, over ``ast`` trees).

A keyword's value (engine.code) is a constant, or a name or attribute (``args.keep_in_memory``)
that an ``add_argument`` or a dataclass field of the same files defines: read from the command line
when it is known, else the default (Flags). And the dotted names calls are matched by.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Sequence
from typing import Any


def dotted(node: ast.AST) -> str:
    """``torch.load`` for ``torch.load``, ``multiprocessing.Manager().dict`` for a call chain."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{dotted(node.value)}.{node.attr}"
    if isinstance(node, ast.Call):
        return f"{dotted(node.func)}()"
    if isinstance(node, ast.Subscript):
        return f"{dotted(node.value)}[]"
    return "?"


def name_matches(name: str, wanted: Iterable[str]) -> bool:
    """``torch.load`` is wanted by ``torch.load`` and ``load``; ``x.Manager().dict`` by ``Manager().dict``."""
    return any(name == w or name.endswith("." + w) for w in wanted)


class Flags:
    """What the command line (or, without it, the defaults) says a script's options are."""

    def __init__(self, trees: Sequence[ast.Module], argv: Sequence[str] | None) -> None:
        self.argv = argv
        self.options: dict[str, tuple[str | None, Any]] = {}  # dest -> (action, default)
        self.fields: dict[str, Any] = {}  # dataclass field name -> default
        for tree in trees:
            for node in ast.walk(tree):
                if isinstance(node, ast.Call) and dotted(node.func).endswith("add_argument"):
                    self._option(node)
                elif isinstance(node, ast.ClassDef):
                    for stmt in node.body:
                        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                            self.fields[stmt.target.id] = _field_default(stmt.value)

    def _option(self, call: ast.Call) -> None:
        flags = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        kw = {k.arg: k.value for k in call.keywords if k.arg}
        longs = [f for f in flags if f.startswith("--")]
        dest = const(kw["dest"]) if "dest" in kw else (longs[0][2:] if longs else (flags[0] if flags else None))
        if not isinstance(dest, str):
            return
        action = const(kw["action"]) if "action" in kw else None
        default = const(kw["default"]) if "default" in kw else (action == "store_false" if action else None)
        self.options[dest.lstrip("-").replace("-", "_")] = (action if isinstance(action, str) else None, default)

    def value(self, name: str) -> tuple[bool, Any, str]:
        """(known, value, how it was known) of option or field ``name``."""
        key = name.replace("-", "_")
        if key in self.options:
            action, default = self.options[key]
            given = self._given(key, action)
            if given is not None:
                return True, given, "from the command line"
            return True, default, "its default" if self.argv is not None else "its default (command line not known)"
        if key in self.fields:
            given = self._given(key, "store_true" if isinstance(self.fields[key], bool) else None)
            if given is not None:
                return True, given, "from the command line"
            return self.fields[key] is not UNKNOWN, self.fields[key], "its default"
        return False, None, ""

    def _given(self, key: str, action: str | None) -> Any:
        if not self.argv:
            return None
        spellings = {"--" + key, "--" + key.replace("_", "-")}
        for i, arg in enumerate(self.argv):
            flag, eq, rest = arg.partition("=")
            if flag not in spellings:
                continue
            if action in ("store_true", "store_false"):
                return action == "store_true"
            text = rest if eq else (self.argv[i + 1] if i + 1 < len(self.argv) else "")
            if not eq and (not text or text.startswith("--")):
                return True  # a bare flag of an HF dataclass bool field
            return _parse_value(text)
        return None


UNKNOWN = object()


def const(node: ast.AST | None) -> Any:
    """A constant's value (a negative number too), else UNKNOWN."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
        value = node.operand.value
        return -value if isinstance(value, (int, float)) else UNKNOWN
    return UNKNOWN


def _field_default(node: ast.AST | None) -> Any:
    if isinstance(node, ast.Call) and dotted(node.func).endswith("field"):
        for k in node.keywords:
            if k.arg == "default":
                return const(k.value)
        return UNKNOWN
    return const(node) if node is not None else UNKNOWN


def _parse_value(text: str) -> Any:
    low = text.lower()
    if low in ("true", "yes", "1"):
        return True
    if low in ("false", "no", "0", "none"):
        return False if low != "none" else None
    try:
        return float(text)
    except ValueError:
        return text
