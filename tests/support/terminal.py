"""A program in a pseudo-terminal whose output is also rendered on a screen (pyte).

The program starts through `subprocess` (fork and exec in C) under `setsid --ctty`, so the terminal
is its controlling one (Ctrl-C reaches it). pexpect's `spawn` forks and then runs Python in the
child: in a test process whose in-process Temporal worker runs threads, that child can deadlock
before it execs (seen in CI: the spawn waited for ever on its exec pipe).
"""

from __future__ import annotations

import codecs
import fcntl
import os
import re
import select
import struct
import subprocess
import termios
import time

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
        self.fd, tty = os.openpty()
        fcntl.ioctl(tty, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        try:
            self.process = subprocess.Popen(
                ["setsid", "--ctty", program, *args], stdin=tty, stdout=tty, stderr=tty, env=env
            )
        finally:
            os.close(tty)
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.pyte = pyte.Screen(cols, rows)
        self.stream = pyte.Stream(self.pyte)
        self.raw = ""
        self.text = ""
        self.mark = 0

    def _read(self, timeout: float) -> bool:
        if not select.select([self.fd], [], [], timeout)[0]:
            return True
        try:
            chunk = os.read(self.fd, 65536)
        except OSError:  # EIO: every holder of the terminal closed it (the program ended)
            return False
        if not chunk:
            return False
        data = self.decoder.decode(chunk)
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
        os.write(self.fd, keys.encode())

    def line(self, text: str) -> None:
        self.send(text + "\r")

    def exit_status(self, timeout: float = 60) -> int:
        deadline = time.monotonic() + timeout
        while self._read(0.1):
            if time.monotonic() > deadline:
                raise AssertionError(f"still running:\n{self.show()}")
        return self.process.wait(timeout=max(deadline - time.monotonic(), 1))

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        os.close(self.fd)
