"""The code that ran: the training script (and modules it imports from its own folder), parsed with
``ast`` and matched against rules/code.yaml — the calls behind each mechanism, each hit a
``file:line`` of evidence. Pure: the edge reads the files (:mod:`oomwatch.scripts`); nothing here
imports or runs them.

A keyword's value decides a hit only when it can be known: a constant, or a name or attribute
(``args.keep_in_memory``, ``data_args.keep_in_memory``) that an ``add_argument`` or a dataclass field
of the same files defines, read from the command line when it is known, else the default. A value
that cannot be known is said as such in the evidence and still counts (engine.code_values reads values).
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from oomwatch.engine.code_values import UNKNOWN, Flags, const, dotted, name_matches
from oomwatch.engine.model import Evidence, Program, SourceFile
from oomwatch.engine.rules.code_rules import CodeRule, Matcher

MAX_SOURCE = 1 << 20  # characters of one file that are parsed
EVICTING = ("pop", "popitem", "clear", "popleft")  # calls that bound a cache
DICT_MAKERS = ("dict", "defaultdict", "OrderedDict")
TO_NUMBERS = ("item", "tolist", "float", "int", "len", "str", "bool", "sum", "mean")  # a step's value, not its array


@dataclass(frozen=True)
class CodeHit:
    rule: str
    file: str
    line: int
    text: str
    value: float | None = None  # a number the rule captured (prefetch_factor=16)
    note: str = ""  # "(set by args.x: default)" and the like

    @property
    def evidence(self) -> Evidence:
        return Evidence(self.file, self.line, self.text + (f"  [{self.note}]" if self.note else ""))


def _co_outputs(loops: Sequence[ast.AST], names: Sequence[str]) -> set[str]:
    """Names bound in these loops beside one of ``names`` by unpacking one call's result (``logits, attn =
    model(x)``, ``out, hidden = rnn(x, hidden)``): the call's other outputs."""
    out: set[str] = set()
    for loop in loops:
        for node in ast.walk(loop):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                for target in node.targets:
                    if isinstance(target, ast.Tuple):
                        bound = [e.id for e in target.elts if isinstance(e, ast.Name)]
                        if any(b in names for b in bound):
                            out.update(bound)
    return out


class _Matcher(ast.NodeVisitor):
    def __init__(self, rules: Sequence[CodeRule], source: SourceFile, lines: list[str], flags: Flags) -> None:
        self.matchers = [(r.id, m) for r in rules for m in r.matchers if m.kind != "text"]
        self.source = source
        self.lines = lines
        self.flags = flags
        self.hits: list[CodeHit] = []
        self.functions: list[str] = []
        self.classes: list[ast.ClassDef] = []
        self.loop_nodes: list[ast.AST] = []  # the loops around the node being visited, innermost last
        self.module_dicts: set[str] = set()  # names bound to a dict at module level, never emptied
        self.defined: set[str] = set()  # names of the functions and classes the file defines (a value: truthy)

    def _hit(self, rule: str, node: ast.AST, value: float | None = None, note: str = "") -> None:
        no = getattr(node, "lineno", 0)
        text = self.lines[no - 1].strip() if 0 < no <= len(self.lines) else ""
        self.hits.append(CodeHit(rule, self.source.path, no, text, value, note))

    def _inside(self, m: Matcher) -> bool:
        return not m.inside or bool(self.functions and self.functions[-1] in m.inside)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for rule, m in self.matchers:
            if m.kind == "decorator":
                for dec in node.decorator_list:
                    self._decorator(rule, m, dec)
        self.functions.append(node.name)
        self.generic_visit(node)
        self.functions.pop()

    visit_AsyncFunctionDef = visit_FunctionDef  # noqa: N815 - ast.NodeVisitor's naming

    def visit_For(self, node: ast.For | ast.While | ast.AsyncFor) -> None:
        self.loop_nodes.append(node)
        self.generic_visit(node)
        self.loop_nodes.pop()

    visit_While = visit_AsyncFor = visit_For  # noqa: N815 - ast.NodeVisitor's naming

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.classes.append(node)
        self.generic_visit(node)
        self.classes.pop()

    def visit_Call(self, node: ast.Call) -> None:
        name = dotted(node.func)
        for rule, m in self.matchers:
            if m.kind == "call" and name_matches(name, m.calls) and self._inside(m):
                self._call(rule, m, node)
            elif m.kind == "append_in_loop" and self.loop_nodes and self._kept(node, m):
                self._hit(rule, node)
            elif m.kind == "decorator" and isinstance(node.func, ast.Call) and node.args:
                self._decorator(rule, m, node.func)  # functools.lru_cache(maxsize=None)(self.decode): by hand
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        for rule, m in self.matchers:
            if not self._inside(m):
                continue
            if m.kind == "subscript_store":
                if any(isinstance(t, ast.Subscript) and self._stored_in(t.value, m) for t in node.targets):
                    self._hit(rule, node)
            elif (
                m.kind == "assign_objects"
                and self.classes
                and any(self._self_attr(t, m) for t in node.targets)
                and _objects(node.value, m.values)
                and (not m.class_has or _has_method(self.classes[-1], m.class_has))
            ):
                self._hit(rule, node)
        self.generic_visit(node)

    def _kept(self, node: ast.Call, m: Matcher) -> bool:
        """``xs.append(v)`` where ``v`` is one of the names, or an expression of one that is still an
        array (``logits.cpu()``, ``torch.softmax(logits, -1)``), not a number (``v.item()``, ``float(v)``).
        The names unpacked from the same call as one of them in the loop are outputs too (``logits, attn =
        model(x)``: ``attn``)."""
        func = node.func
        if not (isinstance(func, ast.Attribute) and func.attr in m.calls and len(node.args) == 1):
            return False
        arg = node.args[0]
        if isinstance(arg, ast.Call):
            outer = arg.func.attr if isinstance(arg.func, ast.Attribute) else dotted(arg.func)
            if outer in TO_NUMBERS:
                return False
        names = set(m.names) | _co_outputs(self.loop_nodes, m.names)
        return any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(arg))

    def _stored_in(self, node: ast.AST, m: Matcher) -> bool:
        """``self.x[k] = v`` (``store_subscript: self``) or ``CACHE[k] = v`` into a dict made at module level
        (``store_subscript: global``), inside a function, and never emptied."""
        if m.values == ("global",):
            return isinstance(node, ast.Name) and node.id in self.module_dicts and bool(self.functions)
        return self._self_attr(node, m)

    def _self_attr(self, node: ast.AST, m: Matcher) -> bool:
        """``self.x`` (the instance's own attribute), not bounded anywhere in its class when asked."""
        if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"):
            return False
        return not (m.unless_evicted and self.classes and _evicted(self.classes[-1], node.attr))

    def _call(self, rule: str, m: Matcher, node: ast.Call) -> None:
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        notes: list[str] = []
        for name, want in m.keyword.items():
            if name not in kw:
                return
            ok, note = self._holds(kw[name], want)
            if not ok:
                return
            notes.append(note)
        for name, unwanted in m.without.items():
            if name in kw and (unwanted == "*" or self._holds(kw[name], unwanted, unknown=False)[0]):
                return
        value = None
        for name, least in m.keyword_ge.items():
            if name not in kw:
                return
            known, v, note = self._value(kw[name])
            number = isinstance(v, (int, float)) and not isinstance(v, bool)
            if known and not (number and v >= least):
                return
            value = float(v) if known and number else None
            notes.append(note)
        if m.first_arg and not (node.args and _objects(node.args[0], m.first_arg)):
            return
        self._hit(rule, node, value, "; ".join(n for n in notes if n))

    def _decorator(self, rule: str, m: Matcher, dec: ast.AST) -> None:
        call = dec if isinstance(dec, ast.Call) else None
        if not name_matches(dotted(call.func if call is not None else dec), m.calls):
            return
        if m.keyword:  # e.g. lru_cache(maxsize=None): bare @lru_cache keeps 128
            kw = {k.arg: k.value for k in call.keywords if k.arg} if call is not None else {}
            if not all(k in kw and self._holds(kw[k], want)[0] for k, want in m.keyword.items()):
                return
        self._hit(rule, dec)

    def _value(self, node: ast.AST) -> tuple[bool, Any, str]:
        value = const(node)
        if value is not UNKNOWN:
            return True, value, ""
        if isinstance(node, ast.IfExp):  # `2 if args.v2 else 24`: the branch its known test picks
            known, test, how = self._value(node.test)
            if not known:
                return False, None, how
            known, value, more = self._value(node.body if test else node.orelse)
            return known, value, "; ".join(n for n in (how, more) if n)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            known, value, how = self._value(node.operand)
            return known, (not value) if known else None, how
        if isinstance(node, ast.Lambda) or (isinstance(node, ast.Name) and node.id in self.defined):
            return True, True, ""  # a function given (preprocess_logits_for_metrics=argmax_logits): truthy
        if isinstance(node, (ast.Name, ast.Attribute)):
            known, value, how = self.flags.value(dotted(node).rsplit(".", 1)[-1])
            if known:
                return True, value, f"{dotted(node)} = {value!r}, {how}"
            return False, None, f"set by {dotted(node)}: its value is not known here"
        return False, None, "its value is not known here"

    def _holds(self, node: ast.AST, want: Any, unknown: bool = True) -> tuple[bool, str]:
        """Whether a keyword's value is ``want`` (True: truthy); ``unknown`` when it cannot be told."""
        known, value, note = self._value(node)
        if not known:
            return unknown, note
        if want is True:
            return bool(value), note
        return value == want, note


def _objects(node: ast.AST, kinds: Sequence[str]) -> bool:
    """Whether ``node`` builds Python objects of one of ``kinds``: list (a literal, comprehension or
    ``list(...)``), dict, calls named like ``tolist``/``json.load``."""
    if isinstance(node, ast.Call):
        name = dotted(node.func)
        if "call:" + name in kinds or any(k.startswith("call:") and name_matches(name, [k[5:]]) for k in kinds):
            return True
        if node.args and (("list" in kinds and name in ("list", "sorted")) or ("dict" in kinds and name == "dict")):
            return True
    if "list" in kinds and (isinstance(node, ast.ListComp) or (isinstance(node, ast.List) and node.elts)):
        return True
    return "dict" in kinds and (isinstance(node, ast.DictComp) or (isinstance(node, ast.Dict) and bool(node.keys)))


def _module_dicts(tree: ast.Module) -> set[str]:
    """Names a module binds to an empty dict at its top level (``_FEATURES = {}``) that nothing pops,
    clears or deletes from."""
    names = set()
    for stmt in tree.body:
        value: ast.expr | None
        if isinstance(stmt, ast.Assign):
            value, targets = stmt.value, stmt.targets
        elif isinstance(stmt, ast.AnnAssign):
            value, targets = stmt.value, [stmt.target]
        else:
            continue
        empty = isinstance(value, ast.Dict) and not value.keys
        made = isinstance(value, ast.Call) and dotted(value.func).rsplit(".", 1)[-1] in DICT_MAKERS
        if empty or made:
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
    for node in ast.walk(tree):
        func = node.func if isinstance(node, ast.Call) else None
        if isinstance(func, ast.Attribute) and func.attr in EVICTING and isinstance(func.value, ast.Name):
            names.discard(func.value.id)
        if isinstance(node, ast.Delete):
            names -= {
                t.value.id for t in node.targets if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name)
            }
    return names


def _has_method(cls: ast.ClassDef, names: Sequence[str]) -> bool:
    return any(isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name in names for s in cls.body)


def _evicted(cls: ast.ClassDef, attr: str) -> bool:
    """``self.attr`` is bounded somewhere in the class: popped, cleared, deleted from, or its length checked."""
    mine = f"self.{attr}"
    for node in ast.walk(cls):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and dotted(func.value) == mine and func.attr in EVICTING:
            return True
        if isinstance(func, ast.Name) and func.id == "len" and node.args and dotted(node.args[0]) == mine:
            return True
    for node in ast.walk(cls):
        if isinstance(node, ast.Delete):
            for t in node.targets:
                if isinstance(t, ast.Subscript) and dotted(t.value) == f"self.{attr}":
                    return True
    return False


def scan_program(program: Program, rules: Sequence[CodeRule]) -> tuple[list[CodeHit], list[str]]:
    """Every hit of ``rules`` in ``program``'s files, and notes (files that do not parse)."""
    trees: list[tuple[SourceFile, ast.Module]] = []
    notes: list[str] = []
    for f in program.files:
        try:
            trees.append((f, ast.parse(f.text[:MAX_SOURCE])))
        except (SyntaxError, ValueError) as exc:
            notes.append(f"{f.path}: not parsed as Python ({exc.__class__.__name__}): its calls were not looked at")
    flags = Flags([t for _, t in trees], program.argv)
    hits: list[CodeHit] = []
    for f, tree in trees:
        matcher = _Matcher(rules, f, f.text.splitlines(), flags)
        matcher.module_dicts = _module_dicts(tree)
        matcher.defined = {n.name for n in ast.walk(tree)
                           if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}  # fmt: skip
        matcher.visit(tree)
        hits.extend(matcher.hits)
        hits.extend(_text_hits(f, rules))
    unique = {(h.rule, h.file, h.line): h for h in hits}  # Manager().dict(): one hit a line
    return sorted(unique.values(), key=lambda h: (h.rule, h.file, h.line)), notes


def _text_hits(f: SourceFile, rules: Sequence[CodeRule]) -> list[CodeHit]:
    texts = [(r.id, m.pattern) for r in rules for m in r.matchers if m.kind == "text"]
    out = []
    for no, line in enumerate(f.text[:MAX_SOURCE].splitlines(), 1):
        code = line.split("#", 1)[0]
        for rule, pattern in texts:
            if pattern.search(code, timeout=0.25):
                out.append(CodeHit(rule, f.path, no, line.strip()))
                break
    return out


def code_facts(hits: Sequence[CodeHit], rules: Sequence[CodeRule], program: Program | None) -> dict[str, Any]:
    """``code.<id>`` (hits), ``code.<id>.value`` (the largest number captured), ``code.files``."""
    facts: dict[str, Any] = {"code.files": len(program.files) if program is not None else 0}
    for rule in rules:
        mine = [h for h in hits if h.rule == rule.id]
        # without the code, its facts are unknown (None), not "no hit" (0)
        facts[f"code.{rule.id}"] = len(mine) if program is not None and program.files else None
        values = [h.value for h in mine if h.value is not None]
        facts[f"code.{rule.id}.value"] = max(values) if values else None
    return facts


def check_code_examples(rule: CodeRule) -> list[str]:
    """Problems with one code rule's examples: each `match` snippet must hit it, no `no_match` one."""
    problems = []
    for want, snippets in ((True, rule.match), (False, rule.no_match)):
        for snippet in snippets:
            hits, notes = scan_program(Program((SourceFile("example.py", snippet),)), [rule])
            if notes:
                problems.append(f"example does not parse: {snippet!r}")
            elif bool(hits) != want:
                problems.append(
                    f"{'match' if want else 'no_match'} example {'misses' if want else 'hits'}: {snippet!r}"
                )
    return problems
