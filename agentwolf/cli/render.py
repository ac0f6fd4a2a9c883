"""Making session text inert before it reaches a terminal.

Model text and tool output are attacker-controlled: raw, a `\\x1b[2J` clears the screen, `\\x1b]52;...`
writes the clipboard, `\\r` or U+202E disguises what a line says. `inert` shows such characters
instead of sending them; JSON output needs none of this (it is data, not a display).
"""

from __future__ import annotations

_CONTROLS = [
    *range(0x20),  # C0, of which only \n and \t stay
    *range(0x7F, 0xA0),  # DEL and C1 (U+009B is a one-byte CSI)
    *range(0x202A, 0x202F),  # bidi embeddings and overrides
    *range(0x2066, 0x206A),  # bidi isolates
]
_TABLE = {c: f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}" for c in _CONTROLS if chr(c) not in "\n\t"}


def inert(text: str) -> str:
    """`text` with every terminal control but newline and tab written out as `\\xNN` (C0, DEL, C1)
    or `\\uNNNN` (bidi controls), as Python spells them: ESC becomes the four characters `\\x1b`.

    For display only: a backslash is left as is, so the result cannot be decoded back."""
    return text.translate(_TABLE)
