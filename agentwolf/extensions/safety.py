"""Path and URI safety for skills: a skill names files by relative path or `skill://` URI, and
neither may reach outside the skill, whatever the spelling (encoding, backslashes, symlinks).

Decoding happens exactly once, at the edge (`safe_path`, `parse_skill_uri`): a double-encoded
`%252e%252e` becomes the literal name `%2e%2e`, never `..`. Code holding an already-decoded path
uses `resolve_within`, which does not decode again.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

from agentwolf.extensions.types import ExtensionError

MAX_SKILL_MD_BYTES = 256 * 1024
MAX_FILES_PER_SKILL = 512
MAX_SKILL_BYTES = 16 * 1024 * 1024
MAX_FILE_BYTES = 4 * 1024 * 1024
"""The largest single reference file a skill may hand out."""

SKILL_SCHEME = "skill://"
SKILL_MD = "SKILL.md"

_DRIVE = re.compile(r"^[A-Za-z]:")


def check_relative(path: str, *, shown: str | None = None) -> str:
    """Refuse a decoded path that is not a plain relative path; `shown` is what the caller wrote."""
    shown = path if shown is None else shown
    if not path:
        raise ExtensionError(f"empty path {shown!r}")
    if "\x00" in path:
        raise ExtensionError(f"path {shown!r} contains a NUL byte")
    if "\\" in path:
        raise ExtensionError(f"path {shown!r} contains a backslash: use '/'")
    if path.startswith(("/", "~")) or _DRIVE.match(path):
        raise ExtensionError(f"path {shown!r} is absolute: only paths relative to the skill are allowed")
    if ".." in path.split("/"):
        raise ExtensionError(f"path {shown!r} contains '..': paths may not leave the skill")
    return path


def resolve_within(root: Path, path: str, *, shown: str | None = None) -> Path:
    """`root / path` resolved (symlinks followed), refused unless it stays inside `root`."""
    check_relative(path, shown=shown)
    shown = path if shown is None else shown
    try:
        base = root.resolve()
        target = (base / path).resolve()
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop
        raise ExtensionError(f"path {shown!r} cannot be resolved: {exc}") from None
    if not target.is_relative_to(base):
        raise ExtensionError(f"path {shown!r} leads outside the skill (through a symlink)")
    return target


def safe_path(root: Path, relative: str) -> Path:
    """Resolve a URL-encoded relative path inside `root`, decoding it exactly once."""
    return resolve_within(root, unquote(relative), shown=relative)


def parse_skill_uri(uri: str) -> tuple[str, str]:
    """`skill://<skill-path>/<file>` -> (skill path, file); `skill://<name>` alone means its SKILL.md.

    The last segment is taken as the file (a reference file in a subfolder of a skill cannot be told
    apart from a nested skill without knowing the skills; callers that know them match the joined
    path by longest skill-path prefix). Both parts come back decoded.
    """
    if not uri.startswith(SKILL_SCHEME):
        raise ExtensionError(
            f"unsupported URI {uri!r}: skill files are named {SKILL_SCHEME}<skill-path>/<file>"
        )
    path = check_relative(unquote(uri[len(SKILL_SCHEME) :].rstrip("/")), shown=uri)
    segments = path.split("/")
    if "" in segments or "." in segments:
        raise ExtensionError(f"URI {uri!r} has an empty or '.' path segment")
    if len(segments) == 1:
        return path, SKILL_MD
    return "/".join(segments[:-1]), segments[-1]
