"""Loading a YAML (or JSON) document that someone else wrote, with limits.

PyYAML's safe loader builds an alias bomb cheaply (aliases share one object), but the
document then expands when it is serialised to JSON: nine lines of "billion laughs" make
gigabytes. Nesting is composed recursively, so a deep document ends in a RecursionError.
This loader counts aliases and nesting while it composes, then measures the document as it
will be sent (aliases expanded, shared nodes counted once per use) before constructing it."""

from __future__ import annotations

from typing import Any

import yaml
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode


class DocumentRefused(ValueError):
    """A document over a limit; the message is one line naming the limit."""


class _LimitedLoader(yaml.SafeLoader):
    def __init__(self, text: str, max_aliases: int, max_depth: int) -> None:
        super().__init__(text)
        self.max_aliases = max_aliases
        self.max_depth = max_depth
        self.aliases = 0
        self.depth = -1  # the root node is at depth 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        if self.check_event(AliasEvent):
            self.aliases += 1
            if self.aliases > self.max_aliases:
                raise DocumentRefused(f"more than {self.max_aliases} YAML aliases (*name); expand them or use fewer")
        self.depth += 1
        try:
            if self.depth > self.max_depth:
                raise DocumentRefused(f"nested deeper than {self.max_depth} levels, the service's limit")
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def _expanded(root: Node, max_depth: int, max_bytes: int) -> None:
    """Refuse a document whose JSON form, aliases expanded, is deeper than `max_depth` or
    larger than `max_bytes` (estimated from below), or that refers to itself."""
    sizes: dict[int, tuple[int, int]] = {}  # id(node) -> (JSON bytes, levels below it)
    on_path: set[int] = set()
    too_deep = DocumentRefused(f"with its aliases expanded the document is nested deeper than {max_depth} levels, "
                               "the service's limit")

    def measure(node: Node, depth: int) -> tuple[int, int]:
        key = id(node)
        known = sizes.get(key)
        if known is not None:
            if depth + known[1] > max_depth:
                raise too_deep
            return known
        if depth > max_depth:
            raise too_deep
        if key in on_path:
            raise DocumentRefused("an alias refers to a node that contains it: the document would be infinite")
        if isinstance(node, ScalarNode):
            result = (len(node.value) + 2, 0)
        else:
            on_path.add(key)
            children: list[Node] = []
            if isinstance(node, SequenceNode):
                children = list(node.value)
            elif isinstance(node, MappingNode):
                children = [part for pair in node.value for part in pair]
            measured = [measure(child, depth + 1) for child in children]
            on_path.discard(key)
            result = (2 + sum(b + 1 for b, _ in measured), 1 + max((d for _, d in measured), default=0))
        if result[0] > max_bytes:
            raise DocumentRefused(f"with its aliases expanded the document is over {max_bytes:,} bytes, "
                                  "the service's limit on a request body")
        sizes[key] = result
        return result

    measure(root, 0)


def load(text: str, *, max_bytes: int, max_depth: int, max_aliases: int) -> Any:
    """The document in `text`, or DocumentRefused (a limit) or yaml.YAMLError (a syntax error)."""
    if len(text.encode()) > max_bytes:
        raise DocumentRefused(f"over {max_bytes:,} bytes, the service's limit on a request body")
    loader = _LimitedLoader(text, max_aliases, max_depth)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _expanded(node, max_depth, max_bytes)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def describe(exc: yaml.YAMLError) -> str:
    """A YAML syntax error on one line: what and where."""
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        return f"{exc.problem or exc.context}{where}"
    return " ".join(str(exc).split())
