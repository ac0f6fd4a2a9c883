"""Change notifications: a skill root's files (watchdog) and bursts of pokes (MCP `list_changed`) become
few `ChangeEvent`s, because each event makes running sessions recompile.

Watchdog calls back on its observer thread; everything crosses to the event loop with
`call_soon_threadsafe`, and only the loop touches the `Debouncer`. Every watcher in the process
shares one observer and one watch per folder (`_SharedWatches`): each watch costs an inotify
instance and a thread, and a user gets 128 instances by default.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import logging
import os
import stat
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
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
    """What a change is about: a move's destination first (an atomic save lands there), never a scratch
    file."""
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
        self.gone = False
        """The watched folder itself was deleted: its watch has ended, even if a folder reappears at once."""

    @property
    def key(self) -> _WatchKey:
        return self.path, self.is_root

    def on_any_event(self, event: FileSystemEvent) -> None:
        self.owner._observed(self, event)


_WatchKey = tuple[str, bool]
"""(path, is_root): a root is watched recursively without following links, an ancestor the other way."""


@dataclass
class _Shared:
    watch: ObservedWatch
    identity: tuple[int, int]
    """Device and inode of the folder when it was watched: a folder replaced at the same path needs a new
    watch."""
    handlers: set[_Handler] = field(default_factory=set)


class _SharedWatches:
    """One observer for the process and one watch per folder, shared by every handler that needs it and
    dropped with the last; the observer stops when no watch is left.

    Called from worker threads (watchers reschedule off the event loop), hence the lock.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._observer: BaseObserver | None = None
        self._watches: dict[_WatchKey, _Shared] = {}

    def add(self, handler: _Handler) -> None:
        """Deliver the events of `handler.path` to `handler`; raises if the folder cannot be watched."""
        with self._lock:
            try:
                self._add(handler)
            finally:
                self._stop_if_idle()

    def remove(self, handler: _Handler) -> None:
        """Stop delivering to `handler`; the folder's watch goes with its last handler."""
        with self._lock:
            shared = self._watches.get(handler.key)
            if self._observer is not None and shared is not None and handler in shared.handlers:
                shared.handlers.discard(handler)
                if shared.handlers:
                    self._observer.remove_handler_for_watch(handler, shared.watch)
                else:
                    del self._watches[handler.key]
                    self._observer.unschedule(shared.watch)
            self._stop_if_idle()

    def _add(self, handler: _Handler) -> None:
        if self._observer is None:
            self._observer = Observer()
            self._observer.start()
        observer = self._observer
        shared = self._watches.pop(handler.key, None)
        if shared is not None and _current(observer, shared, handler.path):
            observer.add_handler_for_watch(handler, shared.watch)
            shared.handlers.add(handler)
            self._watches[handler.key] = shared
            return
        # Nothing watches this folder yet, or a watch of an earlier folder at this path (it ended, or it
        # would report the old folder): one new watch, for every handler still waiting for events.
        if shared is not None:
            observer.unschedule(shared.watch)
        identity = _identity(handler.path)
        # The root at its real path without following links inside it (a skill may not reach outside
        # the root anyway); an ancestor non-recursively, so following links there is harmless.
        watch = observer.schedule(
            handler,
            handler.path,
            recursive=handler.is_root,
            event_filter=_EVENTS,
            follow_symlink=not handler.is_root,
        )
        others = {h for h in shared.handlers if not h.gone} if shared is not None else set()
        for other in others:
            observer.add_handler_for_watch(other, watch)
        self._watches[handler.key] = _Shared(watch, identity, {handler, *others})

    def _stop_if_idle(self) -> None:
        if not self._watches and self._observer is not None:
            _halt(self._observer)
            self._observer = None


def _identity(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino


def _current(observer: BaseObserver, shared: _Shared, path: str) -> bool:
    """Whether a shared watch still reports the folder now at `path`."""
    try:
        same = _identity(path) == shared.identity
    except OSError:
        return False
    alive = any(e.watch == shared.watch and e.is_alive() for e in observer.emitters)
    return same and alive and not any(h.gone for h in shared.handlers)


_WATCHES = _SharedWatches()


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
        self._watching = False
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
        if self._watching:
            return
        self._loop = asyncio.get_running_loop()
        self._watching = True
        try:
            await self._retarget(announce=False)
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        """Stop watching and end `on_change()`; idempotent. Only this watcher's share of the watches goes
        (off the loop: the last user of a watch joins its thread)."""
        self._stopped = True
        watching, self._watching = self._watching, False
        if watching:
            async with self._lock:  # no re-scheduling in flight from here on
                if self._settling is not None:
                    self._settling.cancel()
                await asyncio.to_thread(self._unwatch_all)
        self._debouncer.close()

    # Observer thread.

    def _observed(self, handler: _Handler, event: FileSystemEvent) -> None:
        if os.fsdecode(event.src_path) == handler.path:  # the watched folder itself is gone
            handler.gone = True
            self._call_soon(self._request_retarget)
            return
        if handler.is_root:
            if (path := _changed_path(event)) is not None:
                self._call_soon(self._debouncer.poke, os.path.relpath(path, handler.path))
            return
        # An ancestor's entry: only what lies on the way to the root matters (the ancestor may be busy).
        root = str(self.root)
        if any(p == root or root.startswith(p + os.sep) for p in _paths(event)):
            self._call_soon(self._request_retarget)

    def _call_soon(self, callback: Callable[..., object], *args: object) -> None:
        assert self._loop is not None
        # Its loop may be closed: the shared observer thread must go on for the others.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(callback, *args)

    # Event loop.

    def _request_retarget(self) -> None:
        if not self._watching:
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
            if not self._watching:
                return
            before = self._root
            await asyncio.to_thread(self._reschedule)
            after = self._root
        if announce and after is not before:
            what = "created" if before is None else "deleted" if after is None else "replaced"
            self._debouncer.poke(f"{self.root} {what}")

    # Worker thread (under `_lock`).

    def _reschedule(self) -> None:
        """Point the watches at where the root is now, again and again while the tree changes under us."""
        while True:
            anchor, root_id = _locate(self.root)
            anchor_ok = self._anchor is not None and self._anchor.path == anchor and not self._anchor.gone
            root_ok = root_id == self._root_id and not (self._root is not None and self._root.gone)
            if anchor_ok and root_ok:
                return
            try:
                # Forget an old watch before adding its successor, so a failure leaves nothing stale.
                if not anchor_ok:
                    self._unwatch_anchor()
                    self._anchor = self._watch(anchor, is_root=False)
                if not root_ok:
                    self._unwatch_root()
                    if root_id is not None:
                        self._root = self._watch(root_id[0], is_root=True)
                    self._root_id = root_id
            except (FileNotFoundError, NotADirectoryError):
                continue  # vanished while being watched: look again

    def _watch(self, path: str, *, is_root: bool) -> _Handler:
        handler = _Handler(self, path, is_root=is_root)
        _WATCHES.add(handler)
        return handler

    def _unwatch_anchor(self) -> None:
        if self._anchor is not None:
            _WATCHES.remove(self._anchor)
            self._anchor = None

    def _unwatch_root(self) -> None:
        if self._root is not None:
            _WATCHES.remove(self._root)
        self._root, self._root_id = None, None

    def _unwatch_all(self) -> None:
        self._unwatch_anchor()
        self._unwatch_root()


def _halt(observer: BaseObserver) -> None:
    observer.stop()
    observer.join()
