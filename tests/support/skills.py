"""Skill folders on disk for tests: one writer for the parser, watcher and session tests."""

from __future__ import annotations

import os
from pathlib import Path


def skill_md(front: str, body: str = "Do the thing.\n") -> str:
    return f"---\n{front}\n---\n{body}"


def write_skill(
    root: Path,
    path: str,
    *,
    front: str | None = None,
    extra: str = "",
    body: str = "Do the thing.\n",
    files: dict[str, str | bytes] | None = None,
    atomic: bool = False,
) -> Path:
    """A skill folder at `root/path`, returned. The front matter defaults to the folder's name and a
    description, plus `extra` lines; `atomic` saves as editors do (a temp file renamed over SKILL.md)."""
    folder = root / path
    folder.mkdir(parents=True, exist_ok=True)
    name = path.rsplit("/", 1)[-1]
    if front is None:
        front = f"name: {name}\ndescription: The {name} skill.\n{extra}".rstrip("\n")
    text = skill_md(front, body)
    if atomic:
        (folder / ".SKILL.md.tmp").write_text(text)
        os.replace(folder / ".SKILL.md.tmp", folder / "SKILL.md")
    else:
        (folder / "SKILL.md").write_text(text)
    for rel, content in (files or {}).items():
        target = folder / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content)
    return folder
