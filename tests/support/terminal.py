"""A program in a pseudo-terminal (pexpect) whose output is also rendered on a screen (pyte)."""

from __future__ import annotations

import os
import re
import time

import pexpect
import pyte

CSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b[=>78]|\r")
UP, TAB, CTRL_C = "\x1b[A", "\t", "\x03"


class Terminal:
    """`wait(text)` reads until `text` appears in the output (control sequences stripped) after the
    previous match; `screen()` is what a person would see now."""

    def __init__(
        self, program: str, args: list[str], env: dict[str, str], rows: int = 40, cols: int = 100
    ) -> None:
        env = {**os.environ, **env, "PROMPT_TOOLKIT_NO_CPR": "1", "TERM": "xterm"}
        self.child = pexpect.spawn(
            program, args, env=env, encoding="utf-8", dimensions=(rows, cols), timeout=5
        )
        self.pyte = pyte.Screen(cols, rows)
        self.stream = pyte.Stream(self.pyte)
        self.raw = ""
        self.text = ""
        self.mark = 0

    def _read(self, timeout: float) -> bool:
        try:
            data = self.child.read_nonblocking(65536, timeout=timeout)
        except pexpect.TIMEOUT:
            return True
        except pexpect.EOF:
            return False
        self.raw += data
        self.text += CSI.sub("", data)
        self.stream.feed(data)
        return True

    def wait(self, text: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            found = self.text.find(text, self.mark)
            if found >= 0:
                self.mark = found + len(text)
                return
            if time.monotonic() > deadline or not self._read(0.1):
                raise AssertionError(
                    f"{text!r} not seen; output since the last "
                    f"match:\n{self.text[self.mark :]}\n{self.show()}"
                )

    def wait_screen(self, predicate, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not predicate(self.screen()):
            if time.monotonic() > deadline or not self._read(0.1):
                raise AssertionError(f"screen condition not met:\n{self.show()}")

    def settle(self, seconds: float = 0.3) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and self._read(0.05):
            pass

    def screen(self) -> list[str]:
        return [line.rstrip() for line in self.pyte.display]

    def show(self) -> str:
        return "\n".join(f"|{line}" for line in self.screen())

    def send(self, keys: str) -> None:
        self.child.send(keys)

    def line(self, text: str) -> None:
        self.child.send(text + "\r")

    def exit_status(self, timeout: float = 60) -> int | None:
        deadline = time.monotonic() + timeout
        while self._read(0.1):
            if time.monotonic() > deadline:
                raise AssertionError(f"still running:\n{self.show()}")
        self.child.close()
        return self.child.exitstatus

    def close(self) -> None:
        if self.child.isalive():
            self.child.terminate(force=True)
