"""The suite's guards, a plugin of their own (tests/conftest.py loads it; test_suite_guards.py runs an
inner pytest with it alone, which starts in a second where the conftest's imports take tens on a busy
machine): Ctrl-C reaches what tests start, `@pytest.mark.needs` skips here and fails in CI, and nothing
a test starts outlives the run."""

from __future__ import annotations

import bisect
import signal
from typing import Any

import pytest

from tests.support.needs import missing
from tests.support.processes import describe, mark_this_run, since_boot, started, started_by_this_run, stop

LEFT_BEHIND = pytest.StashKey[list[str]]()
TEST_STARTS = pytest.StashKey[list[tuple[float, str]]]()
"""When each test's setup began: a process left behind is named with the test it started during."""


def pytest_configure(config: pytest.Config) -> None:
    # A shell that runs the suite in the background (`pytest &`, nohup) hands it SIGINT ignored, and
    # every child would inherit that: the tests that press Ctrl-C on `wolf dev` or `wolf follow`
    # then wait for nothing. A handler (unlike SIG_IGN) is reset to the default in an exec'd child.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    mark_this_run()
    config.stash[TEST_STARTS] = []


def pytest_runtest_setup(item: pytest.Item) -> None:
    """`@pytest.mark.needs(present, what)`: skip without `what`, fail in CI (tests/support/needs.py)."""
    item.config.stash[TEST_STARTS].append((since_boot(), item.nodeid))
    for mark in item.iter_markers("needs"):
        present, what = mark.args
        if not present:
            missing(what)


@pytest.hookimpl(trylast=True)  # after pytest's own teardown of session fixtures (the dev server)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """Nothing a test started may outlive the run: stop what is left and fail the run, naming it."""
    left = started_by_this_run()
    if not left:
        return
    starts = session.config.stash[TEST_STARTS]
    session.config.stash[LEFT_BEHIND] = [
        f"{describe(proc)} (started during {_test_at(starts, started(proc))})" for proc in left
    ]
    stop(left)
    if session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _test_at(starts: list[tuple[float, str]], when: float) -> str:
    i = bisect.bisect_right(starts, (when, "\uffff")) - 1
    return starts[i][1] if i >= 0 else "collection"


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if left := config.stash.get(LEFT_BEHIND, None):
        terminalreporter.section("processes left behind (stopped now)", sep="=", red=True)
        for line in left:
            terminalreporter.line(line, red=True)
