"""YAML read with bounds: the file's size, the nesting depth and what aliases expand to.

`yaml.safe_load` executes nothing, but a small file can still cost without bound: aliases that
expand a thousand-fold at each level (billion laughs), or nesting deep enough that composing it
overflows Python's stack (`RecursionError`). These bounds make both a `yaml.YAMLError` with the
line where they were passed, and a file too big an `OversizedFile`.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.events import AliasEvent
from yaml.nodes import Node

from oomwatch.engine.readlimit import OversizedFile, read_text_limited

__all__ = ["MAX_ALIASED_NODES", "MAX_DEPTH", "BoundedSafeLoader", "OversizedFile", "load_bounded", "read_text_limited"]

MAX_DEPTH = 64  # nested collections; the shipped files nest 6 deep
MAX_ALIASED_NODES = 10_000  # nodes reached through aliases, all aliases together


class BoundedSafeLoader(yaml.SafeLoader):
    """SafeLoader that refuses nesting beyond MAX_DEPTH and aliases expanding beyond MAX_ALIASED_NODES."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._depth = 0
        self._composed = 0  # nodes composed so far, counting what each alias stands for
        self._aliased = 0  # of which reached through aliases
        self._sizes: dict[int, int] = {}  # id(node) -> nodes in it, aliases expanded

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:  # type: ignore[override]
        if self.check_event(AliasEvent):
            event = self.peek_event()
            target = self.anchors.get(event.anchor)
            if target is not None:
                size = self._sizes.get(id(target))
                if size is None:  # the alias is inside the node it names
                    raise ComposerError(None, None, f"alias *{event.anchor} refers to itself", event.start_mark)
                self._aliased += size
                self._composed += size
                if self._aliased > MAX_ALIASED_NODES:
                    raise ComposerError(
                        None, None,
                        f"aliases expand to more than {MAX_ALIASED_NODES} nodes (refused: billion-laughs shape)",
                        event.start_mark,
                    )  # fmt: skip
            return super().compose_node(parent, index)
        self._depth += 1
        if self._depth > MAX_DEPTH:
            mark = self.peek_event().start_mark
            raise ComposerError(None, None, f"nested more than {MAX_DEPTH} levels deep", mark)
        before = self._composed
        node = super().compose_node(parent, index)
        self._depth -= 1
        self._composed += 1
        if node is not None:
            self._sizes[id(node)] = self._composed - before
        return node

    def construct_object(self, node: Node, deep: bool = False) -> Any:
        """A value YAML's own constructors cannot make (an integer of 5,000 digits, 30 February) is a
        `yaml.YAMLError` at its line, like any other error in the file."""
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, OverflowError) as exc:
            raise ConstructorError(None, None, f"cannot read {node.tag} value: {exc}", node.start_mark) from None


def load_bounded(text: str, loader: type[BoundedSafeLoader] = BoundedSafeLoader) -> Any:
    """One YAML document from ``text``, within the bounds (a `yaml.YAMLError` beyond them)."""
    instance = loader(text)
    try:
        return instance.get_single_data()
    finally:
        instance.dispose()
