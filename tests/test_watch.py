"""Skill root watching and debouncing, on real files with a real watchdog observer.

Timing: waits poll with generous timeouts (a loaded 2-core machine), and "no event" checks wait ~1 s.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from watchdog.utils import BaseThread

from agentwolf.extensions.types import ChangeEvent, ChangeObservable
from agentwolf.extensions.watch import Debouncer, SkillRootWatcher
from tests.support.polls import settled
from tests.support.skills import skill_md, write_skill


class Inbox:
    """Collects what an iterator of ChangeEvents yields, in the background."""

    def __init__(self, events: AsyncIterator[ChangeEvent]) -> None:
        self.events: list[ChangeEvent] = []
        self.task = asyncio.create_task(self._pump(events))

    async def _pump(self, events: AsyncIterator[ChangeEvent]) -> None:
        async for event in events:
            self.events.append(event)

    async def wait_for(self, predicate: Callable[[list[ChangeEvent]], bool], timeout: float = 15.0) -> None:
        await eventually(lambda: predicate(self.events), timeout, lambda: f"events so far: {self.events}")

    async def settle(self, seconds: float = 1.5, timeout: float = 60.0) -> None:
        """Wait until nothing arrives for `seconds`."""
        await settled(self.events, seconds, timeout)

    async def quiet_for(self, seconds: float) -> None:
        """Wait, then insist nothing (more) arrived."""
        before = list(self.events)
        await asyncio.sleep(seconds)
        assert self.events == before

    def mentioning(self, text: str) -> list[ChangeEvent]:
        return [e for e in self.events if text in e.detail]


async def eventually(predicate: Callable[[], bool], timeout: float, what: Callable[[], str] = str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout} s; {what()}")
        await asyncio.sleep(0.05)


@pytest.fixture
async def skills(tmp_path: Path) -> AsyncIterator[tuple[Path, SkillRootWatcher, Inbox]]:
    root = tmp_path / "skills"
    write_skill(root, "existing")
    watcher = SkillRootWatcher(root, quiet=0.5, max_wait=5.0)
    await watcher.start()
    yield root, watcher, Inbox(watcher.on_change())
    await watcher.stop()


async def test_watcher_is_change_observable(tmp_path: Path) -> None:
    watcher = SkillRootWatcher(tmp_path)
    assert isinstance(watcher, ChangeObservable)
    assert watcher.source == f"skills:{tmp_path}"
    assert SkillRootWatcher(tmp_path, source="skills:mine").source == "skills:mine"


async def test_new_skill_folder_gives_one_event(skills: tuple[Path, SkillRootWatcher, Inbox]) -> None:
    root, watcher, inbox = skills
    write_skill(root, "fresh")
    await inbox.wait_for(lambda events: len(events) >= 1)
    await inbox.quiet_for(1.0)
    [event] = inbox.events
    assert event == ChangeEvent(watcher.source, "skills", event.detail)
    assert "fresh/SKILL.md" in event.detail


async def test_edit_gives_event(skills: tuple[Path, SkillRootWatcher, Inbox]) -> None:
    root, _, inbox = skills
    with (root / "existing" / "SKILL.md").open("a") as f:
        f.write("more\n")
    await inbox.wait_for(lambda events: bool(inbox.mentioning("existing/SKILL.md")))


async def test_atomic_save_names_the_real_file(skills: tuple[Path, SkillRootWatcher, Inbox]) -> None:
    root, _, inbox = skills
    temp = root / "existing" / "SKILL.md.tmp"
    temp.write_text(skill_md("name: existing\ndescription: The existing skill.", "Body 2\n"))
    os.replace(temp, root / "existing" / "SKILL.md")
    await inbox.wait_for(lambda events: len(events) >= 1)
    await inbox.quiet_for(1.0)
    [event] = inbox.events
    assert event.detail == "existing/SKILL.md"


async def test_reading_gives_no_event(skills: tuple[Path, SkillRootWatcher, Inbox]) -> None:
    root, _, inbox = skills
    for _ in range(100):
        with (root / "existing" / "SKILL.md").open() as f:
            f.read()
        (root / "existing" / "SKILL.md").read_bytes()
        os.listdir(root / "existing")
    await inbox.quiet_for(1.0)
    assert inbox.events == []


async def test_scratch_files_alone_give_no_event(skills: tuple[Path, SkillRootWatcher, Inbox]) -> None:
    root, _, inbox = skills
    for name in (".SKILL.md.swp", "SKILL.md~", ".#SKILL.md", "4913", "notes.tmp"):
        scratch = root / "existing" / name
        scratch.write_text("scratch")
        scratch.unlink()
    await inbox.quiet_for(1.0)
    assert inbox.events == []


async def test_root_created_later_then_edited(tmp_path: Path) -> None:
    root = tmp_path / "not" / "yet" / "skills"
    watcher = SkillRootWatcher(root, quiet=0.3, max_wait=5.0)
    await watcher.start()
    try:
        inbox = Inbox(watcher.on_change())
        (tmp_path / "unrelated.txt").write_text("noise next to the missing root")
        await inbox.quiet_for(1.0)

        write_skill(root, "early")  # may land before the root is watched: the "created" event covers it
        await inbox.wait_for(lambda events: bool(inbox.mentioning("created")))

        seen = len(inbox.events)
        write_skill(root, "later")
        await inbox.wait_for(lambda events: any("later/SKILL.md" in e.detail for e in events[seen:]))

        seen = len(inbox.events)
        with (root / "early" / "SKILL.md").open("a") as f:
            f.write("edit\n")
        await inbox.wait_for(lambda events: any("early/SKILL.md" in e.detail for e in events[seen:]))
    finally:
        await watcher.stop()


async def test_root_deleted_then_recreated(skills: tuple[Path, SkillRootWatcher, Inbox]) -> None:
    root, _, inbox = skills
    shutil.rmtree(root)
    await inbox.wait_for(lambda events: bool(inbox.mentioning("deleted")))

    seen = len(inbox.events)
    write_skill(root, "again")
    await inbox.wait_for(lambda events: any("created" in e.detail for e in events[seen:]))

    seen = len(inbox.events)
    write_skill(root, "again", body="Body 1\n")
    await inbox.wait_for(lambda events: any("again/SKILL.md" in e.detail for e in events[seen:]))


async def test_root_renamed_away_and_replaced(skills: tuple[Path, SkillRootWatcher, Inbox]) -> None:
    root, _, inbox = skills
    root.rename(root.with_name("skills.old"))
    await inbox.wait_for(lambda events: bool(inbox.mentioning("deleted")))

    seen = len(inbox.events)
    write_skill(root.with_name("staged"), "new")
    root.with_name("staged").rename(root)
    await inbox.wait_for(lambda events: any("created" in e.detail for e in events[seen:]))

    seen = len(inbox.events)
    write_skill(root.with_name("skills.old"), "gone")  # the old tree is no longer the root
    write_skill(root, "new", body="Body 1\n")
    await inbox.wait_for(lambda events: any("new/SKILL.md" in e.detail for e in events[seen:]))
    assert not inbox.mentioning("gone")


async def test_write_storm_coalesces(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    root.mkdir()
    # A quiet window of 1 s: even on a loaded machine the storm's file events come closer together.
    watcher = SkillRootWatcher(root, quiet=1.0, max_wait=30.0)
    await watcher.start()
    try:
        inbox = Inbox(watcher.on_change())
        for i in range(500):
            write_skill(root, f"s{i % 50}", body=f"Body {i}\n")
        await inbox.wait_for(lambda events: len(events) >= 1, timeout=60)
        await inbox.settle(seconds=2.0, timeout=120)
        assert 1 <= len(inbox.events) <= 10  # 500 writes to 50 skills, a handful of events
        assert any(e.detail.endswith(" more") for e in inbox.events)
    finally:
        await watcher.stop()


async def test_stop_is_idempotent_and_joins_threads(tmp_path: Path) -> None:
    never = SkillRootWatcher(tmp_path / "never-started")
    await never.stop()
    await never.stop()

    watcher = SkillRootWatcher(tmp_path / "missing")
    events = Inbox(watcher.on_change())
    await watcher.start()
    await watcher.start()
    assert any(isinstance(t, BaseThread) for t in threading.enumerate())
    await watcher.stop()
    await watcher.stop()
    assert [t for t in threading.enumerate() if isinstance(t, BaseThread)] == []
    await eventually(events.task.done, 5.0, lambda: "on_change() should end after stop()")
    with pytest.raises(RuntimeError):
        await watcher.start()


async def test_debouncer_coalesces_a_tight_loop() -> None:
    debouncer = Debouncer("mcp:storm", "tools", quiet=0.2, max_wait=5.0)
    inbox = Inbox(debouncer.events())
    for i in range(500):
        debouncer.poke(f"n{i % 7}")
    await inbox.wait_for(lambda events: len(events) >= 1)
    await inbox.quiet_for(0.6)
    assert inbox.events == [ChangeEvent("mcp:storm", "tools", "n0, n1, n2, n3, n4 and 2 more")]
    debouncer.close()


async def test_debouncer_max_wait_bounds_latency() -> None:
    # Pokes never pause for `quiet` (an hour), so only max_wait can bring events within the deadline.
    debouncer = Debouncer("mcp:drip", "resources", quiet=3600, max_wait=0.5)
    inbox = Inbox(debouncer.events())

    async def storm() -> None:
        while True:
            debouncer.poke()
            await asyncio.sleep(0.05)

    pokes = asyncio.create_task(storm())
    try:
        await inbox.wait_for(lambda events: len(events) >= 2, timeout=60)  # the storm goes on
    finally:
        pokes.cancel()
    assert all(e == ChangeEvent("mcp:drip", "resources", "") for e in inbox.events)
    debouncer.close()
    await eventually(inbox.task.done, 30.0, lambda: "events() should end after close()")


def inotify_usage() -> tuple[int, int]:
    """(inotify instances, watches) this process holds: a user gets 128 instances by default."""
    instances = watches = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:inotify":
                instances += 1
                watches += Path(f"/proc/self/fdinfo/{fd}").read_text().count("inotify wd:")
        except OSError:
            pass
    return instances, watches


def _watchdog_threads() -> int:
    return sum(isinstance(t, BaseThread) for t in threading.enumerate())


async def test_watchers_of_one_folder_share_its_watches(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    write_skill(root, "existing")
    before = inotify_usage()
    watchers = [SkillRootWatcher(root, quiet=0.3, max_wait=5.0) for _ in range(200)]
    inboxes = [Inbox(w.on_change()) for w in watchers]
    try:
        await watchers[0].start()
        one, threads = inotify_usage(), _watchdog_threads()
        assert one[0] == before[0] + 1 and one[1] > before[1]
        for watcher in watchers[1:]:
            await watcher.start()
        assert inotify_usage() == one and _watchdog_threads() == threads  # 200 watchers cost what one does
        write_skill(root, "new")
        for inbox in inboxes:
            await inbox.wait_for(lambda events: any("new/SKILL.md" in e.detail for e in events))

        held = inotify_usage()  # one more watch: the new skill's folder
        for watcher in watchers[1:]:  # each stops only its share
            await watcher.stop()
        assert inotify_usage() == held
        seen = len(inboxes[0].events)
        write_skill(root, "newer")
        await inboxes[0].wait_for(lambda events: any("newer/SKILL.md" in e.detail for e in events[seen:]))
    finally:
        for watcher in watchers:
            await watcher.stop()
    assert inotify_usage() == before and _watchdog_threads() == 0


async def test_a_shared_watch_follows_a_replaced_root(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    write_skill(root, "existing")
    watchers = [SkillRootWatcher(root, quiet=0.3, max_wait=5.0) for _ in range(2)]
    inboxes = [Inbox(w.on_change()) for w in watchers]
    try:
        for watcher in watchers:
            await watcher.start()
        shutil.rmtree(root)
        write_skill(root, "again")
        for inbox in inboxes:
            await inbox.wait_for(
                lambda events: any("created" in e.detail or "replaced" in e.detail for e in events)
            )
        await asyncio.gather(*(inbox.settle() for inbox in inboxes))
        seen = [len(inbox.events) for inbox in inboxes]
        write_skill(root, "again", body="Body 1\n")
        for inbox, n in zip(inboxes, seen, strict=True):
            await inbox.wait_for(lambda events, n=n: any("again/SKILL.md" in e.detail for e in events[n:]))
    finally:
        for watcher in watchers:
            await watcher.stop()
