"""Change notifications: a skill root's files (watchdog) and bursts of pokes (MCP `list_changed`) become
few `ChangeEvent`s, because each event makes running sessions recompile.

Watchdog calls back on its observer thread; everything crosses to the event loop with
`call_soon_threadsafe`, and only the loop touches the `Debouncer`.
"""

from __future__ import annotations

import asyncio
import fnmatch
import logging
import os
import stat
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileAttribEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
    FileSystemMovedEvent,
)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver, ObservedWatch

from agentwolf.extensions.types import ChangeEvent, ChangeKind

log = logging.getLogger(__name__)

_SUMMARY_LIMIT = 5

_EVENTS: list[type[FileSystemEvent]] = [
    FileCreatedEvent,
    FileModifiedEvent,
    FileAttribEvent,  # `touch SKILL.md` is how people nudge a reload
    FileDeletedEvent,
    FileMovedEvent,
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
]
"""Reads (opened/closed/closed_no_write) are left out: reading a skill is not changing it."""

_SCRATCH = ("*.swp", "*.swx", "*~", ".#*", "4913", "*.tmp")
"""Editors' swap, backup, lock and probe files: noise until moved onto a real name."""


def _summary(details: list[str]) -> str:
    shown = ", ".join(details[:_SUMMARY_LIMIT])
    extra = len(details) - _SUMMARY_LIMIT
    return f"{shown} and {extra} more" if extra > 0 else shown


class Debouncer:
    """Turns bursts of pokes into few ChangeEvents: one `quiet` s after the last poke of a burst, but never
    later than `max_wait` s after its first, so a storm that never pauses still reports every `max_wait` s.
    """

    def __init__(self, source: str, kind: ChangeKind, *, quiet: float = 0.25, max_wait: float = 2.0) -> None:
        self.source = source
        self.kind = kind
        self.quiet = quiet
        self.max_wait = max_wait
        self._queue: asyncio.Queue[ChangeEvent | None] = asyncio.Queue()
        self._details: dict[str, None] = {}  # distinct, in arrival order
        self._first = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._closed = False

    def poke(self, detail: str = "") -> None:
        """Note a change; call from the event loop thread."""
        if self._closed:
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        if self._timer is None:
            self._first = now
        else:
            self._timer.cancel()
        if detail:
            self._details.setdefault(detail)
        self._timer = loop.call_at(min(now + self.quiet, self._first + self.max_wait), self._emit)

    def _emit(self) -> None:
        self._timer = None
        self._queue.put_nowait(ChangeEvent(self.source, self.kind, _summary(list(self._details))))
        self._details.clear()

    async def events(self) -> AsyncIterator[ChangeEvent]:
        """The coalesced events, for one consumer; ends after `close()`."""
        while (event := await self._queue.get()) is not None:
            yield event

    def close(self) -> None:
        """Drop the pending burst and end `events()`."""
        if self._closed:
            return
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._queue.put_nowait(None)


def _is_scratch(path: str) -> bool:
    name = os.path.basename(path)
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in _SCRATCH)


def _paths(event: FileSystemEvent) -> list[str]:
    paths = [event.src_path, event.dest_path] if isinstance(event, FileSystemMovedEvent) else [event.src_path]
    return [os.fsdecode(p) for p in paths if p]


def _changed_path(event: FileSystemEvent) -> str | None:
    """What a change is about: a move's destination first (an atomic save lands there), never a scratch file."""
    return next((p for p in reversed(_paths(event)) if not _is_scratch(p)), None)


_RootId = tuple[str, int, int]
"""Real path, device, inode: a root replaced by another directory (or a symlink swap) is a different root."""


def _locate(root: Path) -> tuple[str, _RootId | None]:
    """The nearest existing strict ancestor of `root`, and the root's identity when it is a directory."""
    anchor = root.parent
    while not anchor.is_dir():
        anchor = anchor.parent
    try:
        st = root.stat()
    except OSError:
        return str(anchor), None
    return str(anchor), (os.path.realpath(root), st.st_dev, st.st_ino) if stat.S_ISDIR(st.st_mode) else None


class _Handler(FileSystemEventHandler):
    def __init__(self, owner: SkillRootWatcher, path: str, *, is_root: bool) -> None:
        self.owner = owner
        self.path = path
        self.is_root = is_root
        self.watch: ObservedWatch | None = None

    def on_any_event(self, event: FileSystemEvent) -> None:
        self.owner._observed(self, event)


class SkillRootWatcher:
    """Watches a skill root (ChangeObservable, kind "skills"), including one that does not exist yet.

    Two watches: the root itself, recursive, while it is a directory; and its nearest existing ancestor,
    non-recursive, which sees the root (or a missing parent on the way to it) appear, vanish, or be renamed
    away, whereupon the watches move and a change is reported (a new root may already hold skills).
    """

    def __init__(
        self, root: Path, *, source: str | None = None, quiet: float = 0.25, max_wait: float = 2.0
    ) -> None:
        self.root = Path(os.path.abspath(root))
        self.source = source or f"skills:{root}"
        self._debouncer = Debouncer(self.source, "skills", quiet=quiet, max_wait=max_wait)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._observer: BaseObserver | None = None
        self._stopped = False
        self._lock = asyncio.Lock()  # one re-scheduling at a time
        self._settling: asyncio.Task[None] | None = None
        self._retarget_wanted = False
        self._anchor: _Handler | None = None
        self._root: _Handler | None = None
        self._root_id: _RootId | None = None

    def on_change(self) -> AsyncIterator[ChangeEvent]:
        return self._debouncer.events()

    async def start(self) -> None:
        """Begin watching; a root that cannot be watched at all (e.g. inotify limits) raises here."""
        if self._stopped:
            raise RuntimeError("a stopped SkillRootWatcher does not restart")
        if self._observer is not None:
            return
        self._loop = asyncio.get_running_loop()
        self._observer = Observer()
        self._observer.start()
        try:
            await self._retarget(announce=False)
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        """Stop watching and end `on_change()`; idempotent. Joins the watchdog threads off the loop."""
        self._stopped = True
        observer, self._observer = self._observer, None
        if observer is not None:
            async with self._lock:  # no re-scheduling in flight from here on
                if self._settling is not None:
                    self._settling.cancel()
            await asyncio.to_thread(_halt, observer)
        self._debouncer.close()

    # Observer thread.

    def _observed(self, handler: _Handler, event: FileSystemEvent) -> None:
        if handler.is_root:
            if os.fsdecode(event.src_path) == handler.path:  # the root itself is gone
                self._call_soon(self._request_retarget)
            elif (path := _changed_path(event)) is not None:
                self._call_soon(self._debouncer.poke, os.path.relpath(path, handler.path))
            return
        # An ancestor's entry: only what lies on the way to the root matters (the ancestor may be busy).
        root = str(self.root)
        if any(p == root or root.startswith(p + os.sep) for p in _paths(event)):
            self._call_soon(self._request_retarget)

    def _call_soon(self, callback: Callable[..., object], *args: object) -> None:
        assert self._loop is not None
        self._loop.call_soon_threadsafe(callback, *args)

    # Event loop.

    def _request_retarget(self) -> None:
        if self._observer is None:
            return
        self._retarget_wanted = True
        if self._settling is None or self._settling.done():
            self._settling = asyncio.get_running_loop().create_task(self._settle())

    async def _settle(self) -> None:
        while self._retarget_wanted:
            self._retarget_wanted = False
            try:
                await self._retarget(announce=True)
            except OSError:
                log.exception("cannot watch skill root %s; its changes may go unnoticed", self.root)

    async def _retarget(self, *, announce: bool) -> None:
        async with self._lock:
            if self._observer is None:
                return
            before = self._root_id
            await asyncio.to_thread(self._reschedule, self._observer)
            after = self._root_id
        if announce and after != before:
            what = "created" if before is None else "deleted" if after is None else "replaced"
            self._debouncer.poke(f"{self.root} {what}")

    # Worker thread (under `_lock`).

    def _reschedule(self, observer: BaseObserver) -> None:
        """Point the watches at where the root is now, again and again while the tree changes under us."""
        while True:
            anchor, root_id = _locate(self.root)
            anchor_ok = self._anchor is not None and self._anchor.path == anchor
            if anchor_ok and root_id == self._root_id:
                return
            try:
                # Forget an old watch before adding its successor, so a failure leaves nothing stale.
                if not anchor_ok:
                    _unwatch(observer, self._anchor)
                    self._anchor = None
                    self._anchor = self._watch(observer, anchor, is_root=False)
                if root_id != self._root_id:
                    _unwatch(observer, self._root)
                    self._root, self._root_id = None, None
                    if root_id is not None:
                        self._root = self._watch(observer, root_id[0], is_root=True)
                    self._root_id = root_id
            except (FileNotFoundError, NotADirectoryError):
                continue  # vanished while being watched: look again

    def _watch(self, observer: BaseObserver, path: str, *, is_root: bool) -> _Handler:
        handler = _Handler(self, path, is_root=is_root)
        # The root is watched at its real path without following links inside it (a skill may not reach
        # outside the root anyway); an ancestor is watched non-recursively, so following is harmless.
        handler.watch = observer.schedule(
            handler, path, recursive=is_root, event_filter=_EVENTS, follow_symlink=not is_root
        )
        return handler


def _unwatch(observer: BaseObserver, handler: _Handler | None) -> None:
    """Unschedule, also before re-watching the same path: watchdog would reuse a stopped emitter."""
    if handler is not None and handler.watch is not None:
        observer.unschedule(handler.watch)


def _halt(observer: BaseObserver) -> None:
    observer.stop()
    observer.join()
