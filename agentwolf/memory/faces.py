"""The two faces of memory over one store: the `memory` file tool (Anthropic's memory tool commands
over a `/memories` tree; each file is a chain of rows) and the record tools (`remember`,
`search_memory`, `forget`). The namespace comes from the caller (tenant from the workflow id, owner
recorded at the session's start); nothing in the model's arguments can name another one: a path is
only a key inside the namespace, and is refused unless it is a plain path under /memories."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

from agentwolf.memory import ranking
from agentwolf.memory.namespaces import Layer, Namespace
from agentwolf.memory.store import FILE, TOMBSTONE, MemoryStore, MemoryStoreError, NewRow, Plan, Reader, Row
from agentwolf.workflows.memory_tools import KINDS, MemoryCall, MemoryOutput

ROOT = "/memories"
MAX_PATH = 512
MAX_TEXT = 100_000
LAYERS: tuple[Layer, ...] = ("own", "agent", "tenant")


class Refused(ValueError):
    """A call the model should be told is wrong (a bad path, a missing file)."""


def memory_path(raw: Any) -> str:
    """`raw` as a normalized path under /memories, or Refused: no `..` or `.` parts (also
    percent-encoded), no backslashes, control characters or empty parts."""
    if not isinstance(raw, str) or not raw or len(raw) > MAX_PATH:
        raise Refused("a path under /memories is needed")
    path = raw
    for _ in range(3):  # %252e%252e decodes twice
        decoded = unquote(path)
        if decoded == path:
            break
        path = decoded
    if "%" in path and unquote(path) != path or any(c in path for c in "\\\0") or not path.isprintable():
        raise Refused(f"refused path {raw!r}: only plain paths under {ROOT}")
    parts = path.rstrip("/").split("/")
    if parts[:2] != ["", "memories"] or any(p in ("", ".", "..") for p in parts[2:]):
        raise Refused(f"refused path {raw!r}: only paths under {ROOT}, without '.' or '..'")
    return "/".join(parts)


def digest(tool: str, arguments: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps([tool, arguments], sort_keys=True, default=str).encode()).hexdigest()


class Faces:
    """One call's view of the store: the namespaces it reads and writes."""

    def __init__(self, store: MemoryStore, tenant: str, call: MemoryCall) -> None:
        self.store, self.call = store, call
        self.own = Namespace(tenant, call.owner, call.agent)
        self.reads = [self.own, *(self.own.layer(layer) for layer in call.settings.shared)]

    def run(self) -> MemoryOutput:
        handlers: dict[str, Callable[[dict[str, Any]], MemoryOutput]] = {
            "memory": self.file_tool,
            "remember": self.remember,
            "search_memory": self.search,
            "forget": self.forget,
        }
        handler = handlers.get(self.call.tool)
        if handler is None:
            return MemoryOutput(content=f"no memory tool {self.call.tool!r}", is_error=True)
        try:
            return handler(self.call.arguments)
        except (Refused, MemoryStoreError) as exc:
            return MemoryOutput(content=str(exc), is_error=True, seen=self.store.revisions(self.reads))

    # Writes.
    def _write(self, ns: Namespace, plan: Callable[[Reader], Plan]) -> MemoryOutput:
        call = self.call
        receipt = self.store.write(
            ns, call.view, call.key, digest(call.tool, call.arguments), call.provenance, plan
        )
        return MemoryOutput(
            content=receipt.answer, seen={**self.store.revisions(self.reads), ns.key: receipt.revision}
        )

    def _layer(self, name: Any) -> Namespace:
        layer = name or "own"
        if layer not in LAYERS:
            raise Refused(f"no memory layer {layer!r}: own, agent or tenant")
        if layer != "own" and layer not in self.call.settings.write_shared:
            raise Refused(f"the {layer} layer is read-only for this agent")
        return self.own.layer(layer)

    def remember(self, args: dict[str, Any]) -> MemoryOutput:
        text, kind, about = args.get("text"), args.get("kind"), args.get("about") or ""
        if not isinstance(text, str) or not text.strip() or len(text) > MAX_TEXT:
            raise Refused("remember needs `text` (at most 100,000 characters)")
        if kind not in KINDS:
            raise Refused(f"`kind` is one of {', '.join(KINDS)}")
        if not isinstance(about, str):
            raise Refused("`about` is text")
        ns = self._layer(args.get("layer"))
        supersedes = args.get("supersedes") or None
        if supersedes is not None:
            supersedes = self._id_in(supersedes, ns)
        source = "user_stated" if args.get("stated_by_user") is True else "inferred"
        provenance = self.call.provenance.model_copy(update={"source": source})
        call = self.call.model_copy(update={"provenance": provenance})

        def plan(reader: Reader) -> Plan:
            if supersedes is not None and not self._current_record(reader, ns, supersedes):
                return Plan(error=f"no current memory {supersedes!r} to correct")
            return Plan([NewRow(kind, text.strip(), about, None, supersedes)], "kept as {id}")

        self.call = call
        return self._write(ns, plan)

    def forget(self, args: dict[str, Any]) -> MemoryOutput:
        reason = args.get("reason")
        if not isinstance(reason, str) or not reason.strip():
            raise Refused("forget needs `id` and `reason`")
        target = args.get("id")
        layer, _, bare = str(target).rpartition(":")
        ns = self._layer(layer or "own")
        row_id = self._id_in(bare, ns)

        def plan(reader: Reader) -> Plan:
            if not self._current_record(reader, ns, row_id):
                return Plan(error=f"no current memory {target!r}")
            return Plan([NewRow(TOMBSTONE, reason.strip(), supersedes=row_id)], f"forgot {target}")

        return self._write(ns, plan)

    @staticmethod
    def _id_in(value: Any, ns: Namespace) -> str:
        if not isinstance(value, str) or not value.startswith("m") or not value[1:].isdigit():
            raise Refused(f"no memory {value!r}")
        return value

    def _current_record(self, reader: Reader, ns: Namespace, row_id: str) -> bool:
        rows = reader.current(self.call.view, [ns], ids=[row_id], kinds=KINDS, limit=1)
        return bool(rows)

    # Reads.
    def search(self, args: dict[str, Any]) -> MemoryOutput:
        query, k = args.get("query"), args.get("k") or self.call.settings.search_results
        if not isinstance(query, str) or not query.strip():
            raise Refused("search_memory needs `query`")
        if not isinstance(k, int) or not 1 <= k <= 50:
            raise Refused("`k` is 1 to 50")
        seen = self.store.revisions(self.reads)
        found = self.store.search(self.call.view, self.reads, ranking.terms(query), ranking.POOL)
        hits = ranking.rank(found, query, k)
        if not hits:
            return MemoryOutput(content="no memories match", seen=seen)
        return MemoryOutput(content="\n".join(self.line(r) for r in hits), seen=seen)

    @staticmethod
    def line(row: Row) -> str:
        label = row.namespace.label
        ident = row.id if label == "own" else f"{label}:{row.id}"
        when = time.strftime("%Y-%m-%d", time.gmtime(row.created))
        about = f", about {row.about}" if row.about else ""
        return f"[{ident}] ({row.kind}{about}, {when}) {row.body}"

    # The file face.
    def file_tool(self, args: dict[str, Any]) -> MemoryOutput:
        command = args.get("command")
        if command == "view":
            return self.view(memory_path(args.get("path", ROOT)), args.get("view_range"))
        ops: dict[str, Callable[[dict[str, Any]], Callable[[Reader], Plan]]] = {
            "create": self._create,
            "str_replace": self._str_replace,
            "insert": self._insert,
            "delete": self._delete,
            "rename": self._rename,
        }
        if command not in ops:
            raise Refused("`command` is one of view, create, str_replace, insert, delete, rename")
        return self._write(self.own, ops[command](args))

    def _file(self, reader: Reader, path: str) -> Row | None:
        rows = reader.current(self.call.view, [self.own], kinds=[FILE], path=path, limit=1)
        return rows[0] if rows else None

    def _under(self, reader: Reader, path: str) -> list[Row]:
        return reader.current(self.call.view, [self.own], kinds=[FILE], prefix=path + "/")

    def view(self, path: str, view_range: Any) -> MemoryOutput:
        seen = self.store.revisions(self.reads)
        file = self._file(self.store, path)
        if file is not None:
            lines = file.body.split("\n")
            start, end = 1, len(lines)
            if view_range is not None:
                if not (
                    isinstance(view_range, list)
                    and len(view_range) == 2
                    and all(isinstance(n, int) for n in view_range)
                ):
                    raise Refused("`view_range` is [start, end]")
                start, end = max(1, view_range[0]), (len(lines) if view_range[1] == -1 else view_range[1])
            numbered = "\n".join(f"{n:6}\t{lines[n - 1]}" for n in range(start, min(end, len(lines)) + 1))
            return MemoryOutput(
                content=f"Here's the content of {path} with line numbers:\n{numbered}", seen=seen
            )
        files = (
            self._under(self.store, path)
            if path != ROOT
            else self.store.current(self.call.view, [self.own], kinds=[FILE], prefix=ROOT + "/")
        )
        if not files and path != ROOT:
            raise Refused(f"The path {path} does not exist.")
        listing = [f"{len(f.body.encode())}\t{f.path}" for f in sorted(files, key=lambda f: f.path or "")]
        body = "\n".join(listing) if listing else "(empty)"
        return MemoryOutput(content=f"Here're the files and directories in {path}:\n{body}", seen=seen)

    def _create(self, args: dict[str, Any]) -> Callable[[Reader], Plan]:
        path, text = memory_path(args.get("path")), args.get("file_text")
        if path == ROOT:
            raise Refused(f"{ROOT} is a directory")
        if not isinstance(text, str) or len(text) > MAX_TEXT:
            raise Refused("create needs `file_text` (at most 100,000 characters)")

        def plan(reader: Reader) -> Plan:
            if self._under(reader, path):
                return Plan(error=f"{path} is a directory")
            old = self._file(reader, path)
            return Plan(
                [NewRow(FILE, text, path=path, supersedes=old.id if old else None)],
                f"File created successfully at: {path}",
            )

        return plan

    def _edit(self, path: str, change: Callable[[str], str]) -> Callable[[Reader], Plan]:
        def plan(reader: Reader) -> Plan:
            old = self._file(reader, path)
            if old is None:
                return Plan(error=f"The path {path} does not exist.")
            try:
                body = change(old.body)
            except Refused as exc:
                return Plan(error=str(exc))
            return Plan(
                [NewRow(FILE, body, path=path, supersedes=old.id)], "The memory file has been edited."
            )

        return plan

    def _str_replace(self, args: dict[str, Any]) -> Callable[[Reader], Plan]:
        path, old, new = memory_path(args.get("path")), args.get("old_str"), args.get("new_str", "")
        if not isinstance(old, str) or not old or not isinstance(new, str):
            raise Refused("str_replace needs `old_str` and `new_str`")

        def change(body: str) -> str:
            count = body.count(old)
            if count != 1:
                raise Refused(f"`old_str` occurs {count} times in {path}: it must occur exactly once")
            return body.replace(old, new)

        return self._edit(path, change)

    def _insert(self, args: dict[str, Any]) -> Callable[[Reader], Plan]:
        path, line, text = memory_path(args.get("path")), args.get("insert_line"), args.get("insert_text")
        if not isinstance(line, int) or line < 0 or not isinstance(text, str):
            raise Refused("insert needs `insert_line` (0 or more) and `insert_text`")

        def change(body: str) -> str:
            lines = body.split("\n")
            if line > len(lines):
                raise Refused(f"`insert_line` {line} is past the end of {path} ({len(lines)} lines)")
            return "\n".join([*lines[:line], *text.rstrip("\n").split("\n"), *lines[line:]])

        return self._edit(path, change)

    def _delete(self, args: dict[str, Any]) -> Callable[[Reader], Plan]:
        path = memory_path(args.get("path"))
        if path == ROOT:
            raise Refused(f"{ROOT} itself cannot be deleted")

        def plan(reader: Reader) -> Plan:
            gone = [f for f in [self._file(reader, path), *self._under(reader, path)] if f is not None]
            if not gone:
                return Plan(error=f"The path {path} does not exist.")
            rows = [NewRow(TOMBSTONE, "deleted", path=f.path, supersedes=f.id) for f in gone]
            return Plan(rows, f"Deleted {path}")

        return plan

    def _rename(self, args: dict[str, Any]) -> Callable[[Reader], Plan]:
        old, new = memory_path(args.get("old_path")), memory_path(args.get("new_path"))
        if ROOT in (old, new):
            raise Refused(f"{ROOT} itself cannot be renamed")

        def plan(reader: Reader) -> Plan:
            file = self._file(reader, old)
            if file is None:
                return Plan(error=f"The path {old} does not exist.")
            if self._file(reader, new) is not None or self._under(reader, new):
                return Plan(error=f"The destination {new} already exists.")
            rows = [
                NewRow(FILE, file.body, path=new),
                NewRow(TOMBSTONE, f"renamed to {new}", path=old, supersedes=file.id),
            ]
            return Plan(rows, f"Renamed {old} to {new}")

        return plan
