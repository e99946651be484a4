"""Rule files as YAML: every mapping keeps its line (`__line__`), a duplicated key is an error.

Imported only when rule files are read (not when the rules come from oomwatch.rulecache). The
shipped rules are read with libyaml's C parser where PyYAML has it (several times faster); a
`--rules` directory, which anyone may hand over, with the bounded pure-Python loader
(engine.yamlsafe: nesting depth and alias expansion bounded).
"""

from __future__ import annotations

from typing import Any

import yaml

from oomwatch.engine.yamlsafe import BoundedSafeLoader, load_bounded

YAMLError = yaml.YAMLError


class _LineLoader(BoundedSafeLoader):
    """SafeLoader (bounded in depth and alias expansion) that records each mapping's line as the key `__line__`."""


_FastBase: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _FastLineLoader(_FastBase):  # type: ignore[misc, valid-type]
    """The same, on libyaml's parser: for the shipped rules only (no bounds needed on our own files)."""


def _construct_mapping(loader: Any, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        if not isinstance(key_node, yaml.ScalarNode):  # `? [a, b]`: no rule key is a list or a mapping
            raise yaml.constructor.ConstructorError(
                None, None, "a key must be a plain word, not a list or mapping", key_node.start_mark
            )
        key = key_node.value
        if key in seen:  # YAML would silently keep the last one
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    mapping = loader.construct_mapping(node, deep=True)
    mapping["__line__"] = node.start_mark.line + 1
    return mapping


for _loader in (_LineLoader, _FastLineLoader):
    _loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def parse_rules_yaml(text: str, trusted: bool = False) -> Any:
    """One YAML document; `trusted` (the shipped rules) takes the fast parser. yaml.YAMLError on
    bad YAML, with its line."""
    if trusted and _FastBase is not yaml.SafeLoader:
        loader = _FastLineLoader(text)
        try:
            return loader.get_single_data()
        finally:
            loader.dispose()
    return load_bounded(text, _LineLoader)
