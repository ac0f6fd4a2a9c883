"""YAML frontmatter of Markdown files (SKILL.md, agent files), parsed as untrusted input.

Shared by skills (extensions) and Markdown agents (config): both arrive in cloned repos and shared
folders, so anchors, aliases, deep nesting and duplicate keys are refused."""

from __future__ import annotations

from collections import Counter
from typing import Any

import yaml

_MAX_DEPTH = 20


class FrontmatterError(ValueError):
    """Frontmatter that cannot be read; the message says where and why."""


class _FrontmatterLoader(yaml.SafeLoader):
    """SafeLoader without anchors/aliases, deep nesting and duplicate keys.

    Aliases let a few lines expand exponentially (billion laughs) and frontmatter never needs them;
    PyYAML slows down quadratically with nesting depth; a duplicate key would let a reader see one
    `name` while the parser keeps the other.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        line = event.start_mark.line + 2  # frontmatter starts on line 2 of the file
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise FrontmatterError(f"YAML anchors and aliases are not allowed in frontmatter (line {line})")
        if self._depth >= _MAX_DEPTH:
            raise FrontmatterError(f"frontmatter is nested more than {_MAX_DEPTH} levels deep (line {line})")
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        keys = Counter(key.value for key, _ in node.value if isinstance(key, yaml.ScalarNode))
        duplicates = sorted(key for key, count in keys.items() if count > 1)
        if duplicates:
            raise FrontmatterError(f"duplicate frontmatter keys: {', '.join(duplicates)}")
        return super().construct_mapping(node, deep)


def split_frontmatter(text: str, kind: str) -> tuple[dict[Any, Any], str]:
    """(frontmatter mapping, body) of a Markdown file; `kind` names the file in errors."""
    lines = text.removeprefix("\ufeff").splitlines(keepends=True)
    if not lines or lines[0].rstrip() != "---":
        raise FrontmatterError(f"{kind} must start with a '---' line opening its YAML frontmatter")
    close = next((i for i, line in enumerate(lines) if i and line.rstrip() == "---"), None)
    if close is None:
        raise FrontmatterError("the frontmatter opened by '---' on line 1 is never closed by a '---' line")
    source = "".join(lines[1:close])
    try:
        meta = yaml.load(source, Loader=_FrontmatterLoader)  # a SafeLoader subclass
    except yaml.YAMLError as exc:
        hint = " (tabs are not allowed for indentation)" if "\t" in source else ""
        raise FrontmatterError(f"frontmatter is not valid YAML{hint}: {exc}") from None
    if not isinstance(meta, dict):
        raise FrontmatterError(f"frontmatter must be a mapping of keys to values, not {type(meta).__name__}")
    return meta, "".join(lines[close + 1 :]).lstrip("\r\n")
