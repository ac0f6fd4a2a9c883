"""`wolf chat`: an interactive session on prompt_toolkit.

Line editing and a history file (`$WOLF_HOME/chat_history`); answers stream above the prompt (the
unfinished line, a spinner and the running tools are shown in the prompt's own area, rendered by
`live_view`); a line typed while a turn runs steers it (`/queue TEXT` sends it as a new prompt, which
the agent's `double_texting` policy queues, refuses or lets interrupt); Ctrl-C interrupts a running
turn and clears the line when idle, a second Ctrl-C at an empty prompt leaves; a tool call waiting for
approval is asked inline (`approve? [y]es / [n]o / [a]lways`); Tab completes slash commands.

When stdin is not a terminal, lines are read one by one, each one a turn, and output is plain text.
"""

from __future__ import annotations

import asyncio
import io
import json
import signal
import sys
from collections.abc import Iterable
from typing import Any

from prompt_toolkit import PromptSession
from prompt_toolkit.completion import CompleteEvent, Completer, Completion
from prompt_toolkit.document import Document
from prompt_toolkit.formatted_text import ANSI
from prompt_toolkit.history import FileHistory
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
from prompt_toolkit.keys import Keys
from prompt_toolkit.patch_stdout import patch_stdout
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from rich.console import Console
from rich.text import Text
from temporalio.client import WorkflowUpdateFailedError

from agentwolf.cli.live_view import ConsoleSink, LiveView, PlainSink, Sink
from agentwolf.cli.render import inert
from agentwolf.client.wolf_client import WolfClient
from agentwolf.paths import data_dir
from agentwolf.workflows.types import LIVE_KINDS, Event

PROMPT = "you> "
NO_WORKER_NOW = "(no worker polls now: the prompt waits in the session and runs when one does)"
CHAT_COMMANDS = {
    "/exit": "leave the chat",
    "/queue": (
        "send TEXT as a new prompt (per the agent's double_texting) instead of steering the running turn"
    ),
    "/interrupt": "interrupt the running turn",
    "/compact": "compact the working context at the next safe point (the transcript stays whole)",
    "/pin": "pin TEXT: sent with the instructions in every model request, never compacted",
    "/help": "what the chat understands",
}
HELP = (
    "Enter sends a prompt; while a turn runs, a line steers it (/queue TEXT queues it instead). "
    "Ctrl-C interrupts a turn or clears the line; Ctrl-C twice at an empty prompt (or /exit, Ctrl-D) leaves. "
    "Tab completes slash commands."
)


class SlashCompleter(Completer):
    """Completes `/name` at the start of a line from the chat's and the session's commands."""

    def __init__(self, commands: dict[str, str]) -> None:
        self.commands = commands

    def get_completions(self, document: Document, complete_event: CompleteEvent) -> Iterable[Completion]:
        text = document.text_before_cursor
        if not text.startswith("/") or " " in text:
            return
        for name in sorted(self.commands):
            if name.startswith(text):
                yield Completion(name, start_position=-len(text), display_meta=inert(self.commands[name]))


def transcript_lines(messages: list[ModelMessage]) -> list[Text]:
    """A transcript as `wolf follow` would have shown it (inert)."""
    lines: list[Text] = []
    names: dict[str, str] = {}
    for message in messages:
        for part in message.parts:
            if isinstance(message, ModelRequest) and isinstance(part, UserPromptPart):
                content = part.content if isinstance(part.content, str) else "[non-text prompt]"
                lines.append(Text(inert(f"> {content}"), "bold"))
            elif isinstance(message, ModelRequest) and isinstance(part, ToolReturnPart):
                result = inert(str(part.content).replace("\n", " ")[:120])
                lines.append(Text(f"  <- {inert(part.tool_name)}: {result}", "green"))
            elif isinstance(message, ModelResponse) and isinstance(part, TextPart) and part.content:
                lines.append(Text(inert(part.content)))
            elif isinstance(message, ModelResponse) and isinstance(part, ToolCallPart):
                names[part.tool_call_id] = part.tool_name
                lines.append(
                    Text(f"  -> {inert(part.tool_name)}({inert(json.dumps(part.args_as_dict()))})", "cyan")
                )
    return lines


def _answer(line: str) -> str | None:
    word = line.strip().lower()
    for answer in ("yes", "no", "always"):
        if word and answer.startswith(word):
            return answer
    return None


class Chat:
    """One terminal chat on one session (prompt_toolkit)."""

    def __init__(self, wolf: WolfClient, session_id: str, err: Console) -> None:
        self.wolf = wolf
        self.sid = session_id
        self.err = err
        self.console = Console(
            force_terminal=True, highlight=False, soft_wrap=True, markup=False, emoji=False
        )  # its file is sys.stdout when it prints: the patched one, so lines go above the prompt
        self.view = LiveView(ConsoleSink(self.console), session_id, on_change=self._invalidate)
        self.commands: dict[str, str] = dict(CHAT_COMMANDS)
        self.answered: set[str] = set()
        self.armed = False
        """A Ctrl-C at an empty prompt was pressed: the next one leaves."""
        self.leaving = False
        bindings = KeyBindings()
        bindings.add("c-c")(self._ctrl_c)
        bindings.add(Keys.SIGINT)(self._ctrl_c)
        self.prompt: PromptSession[str] = PromptSession(
            history=FileHistory(str(data_dir() / "chat_history")),
            completer=SlashCompleter(self.commands),
            complete_while_typing=False,
            key_bindings=bindings,
            erase_when_done=True,  # the prompt area (with the live region) goes; `_echo` prints the line
        )
        self.prompt.default_buffer.on_text_changed += self._disarm

    # -- display -------------------------------------------------------------------------------

    def _invalidate(self) -> None:
        self.prompt.app.invalidate()

    def _say(self, text: str, style: str = "dim") -> None:
        self.view.note(Text(text, style))

    def _region(self) -> str:
        buf = io.StringIO()
        width = self.console.width
        region = Console(
            file=buf,
            force_terminal=True,
            width=width,
            color_system="standard",
            no_color=self.console.no_color,
        )
        region.print(self.view.region(), end="")
        return buf.getvalue()

    def _pending(self) -> Event | None:
        return next((e for c, e in self.view.approvals.items() if c not in self.answered), None)

    def _question(self) -> str | None:
        pending = self._pending()
        if pending is None:
            return None
        return inert(f"approve {pending.tool}({json.dumps(pending.args)})? [y]es / [n]o / [a]lways ")

    def message(self) -> ANSI:
        region = self._region()
        question = self._question()
        tail = PROMPT if question is None else f"\x1b[1;33m{question}\x1b[0m"
        return ANSI((region.rstrip("\n") + "\n" if region.strip() else "") + tail)

    def _echo(self, line: str) -> None:
        """The line as entered, where the erased prompt was (the live region is not kept)."""
        question = self._question()
        if question is None:
            self.view.note(Text(PROMPT, "bold") + Text(inert(line)))
        else:
            self.view.note(Text(question, "bold yellow") + Text(inert(line)))

    # -- keys ----------------------------------------------------------------------------------

    def _disarm(self, _: Any = None) -> None:
        self.armed = False

    def _ctrl_c(self, event: KeyPressEvent) -> None:
        buffer = event.app.current_buffer
        if buffer.text:
            buffer.reset()
            self.armed = False
            return
        self._interrupt_or_leave(event.app)

    def _interrupt_or_leave(self, app: Any = None) -> None:
        if self.armed:
            self.leaving = True
            if app is not None and app.is_running:
                app.exit(exception=EOFError())
            return
        self.armed = True
        if self.view.running:
            self._say("interrupting the turn (Ctrl-C again to leave)", "yellow")
            asyncio.get_running_loop().create_task(
                self._send(self.wolf.interrupt(self.sid, "Ctrl-C in wolf chat"))
            )
        else:
            self._say("(Ctrl-C again to leave, or /exit)")

    def _on_sigint(self) -> None:
        """Ctrl-C while no prompt reads keys (between two prompts)."""
        self._interrupt_or_leave(self.prompt.app)

    # -- sending -------------------------------------------------------------------------------

    async def _send(self, call: Any) -> bool:
        try:
            await call
        except WorkflowUpdateFailedError as exc:
            self._say(f"refused: {inert(str(exc.cause))}", "red")
        except ValueError as exc:
            self._say(f"refused: {inert(str(exc))}", "red")
        else:
            return True
        return False

    async def _send_prompt(self, text: str) -> bool:
        """A prompt; while no worker polls, left in the session (and said) to run when one does."""
        sending = asyncio.ensure_future(self.wolf.prompt_or_leave(self.sid, text))
        if not await self._send(sending):
            return False
        if sending.result() is None:
            self._say(NO_WORKER_NOW, "yellow")
        return True

    async def _context_command(self, command: str, rest: str) -> None:
        """`/compact`: compact at the next safe point; `/pin TEXT`: a note every request carries."""
        if command == "/compact":
            if await self._send(self.wolf.compact(self.sid)):
                self._say("(compacting at the next safe point)")
        elif rest and await self._send(self.wolf.pin(self.sid, rest)):
            self._say("(pinned)")

    async def handle(self, line: str) -> bool:
        """One line the user entered; False: leave."""
        pending = self._pending()
        if pending is not None and not line.startswith("/"):
            answer = _answer(line)
            call = pending.call_id or ""
            if answer is None:
                self._say(
                    "answer y (yes), n (no) or a (always: this tool for the rest of the session)", "yellow"
                )
            elif answer == "no":
                self.answered.add(call)
                await self._send(self.wolf.deny(self.sid, call, "denied in wolf chat"))
            else:
                self.answered.add(call)
                await self._send(self.wolf.approve(self.sid, call, always=answer == "always"))
            return True
        text = line.strip()
        if not text:
            return True
        command, _, rest = text.partition(" ")
        if command == "/exit":
            return False
        if command == "/help":
            self._say(HELP)
        elif command == "/interrupt":
            await self._send(self.wolf.interrupt(self.sid, "/interrupt in wolf chat"))
        elif command == "/queue":
            if rest.strip():
                await self._send_prompt(rest)
        elif command in ("/compact", "/pin"):
            await self._context_command(command, rest.strip())
        elif self.view.running and not command.startswith("/"):
            if await self._send(self.wolf.steer(self.sid, text)):
                self._say("(steering the running turn)")
        else:
            self.view.running = True  # the spinner shows before turn_started arrives
            if not await self._send_prompt(text):
                self.view.running = False
        return True

    # -- running -------------------------------------------------------------------------------

    async def _follow(self, offset: int) -> None:
        """Feed the view until the session closes; a broken subscription is taken up again from the
        last durable event (deltas seen before are skipped by their index)."""
        failures = 0
        while True:
            try:
                async for position, event in self.wolf.events(self.sid, offset):
                    failures = 0
                    if event.kind not in LIVE_KINDS:
                        offset = position + 1
                    if event.kind in ("turn_finished", "session_closed"):
                        # Before the view says so: Tab right after "turn completed" knows the commands.
                        self.commands.update(await self.wolf.commands(self.sid))
                    self.view.feed(event)
                    if event.kind in ("turn_finished", "session_closed"):
                        self.answered.clear()
                        self.armed = False
                    if event.kind == "session_closed":
                        self._say("the session is closed: /exit leaves")
                        return
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001  the chat stays usable: follow again, or say why not
                failures += 1
                if failures > 5:
                    self._say(f"stopped following the session: {inert(str(exc))}", "red")
                    return
                await asyncio.sleep(0.5 * failures)

    async def _tick(self) -> None:
        """Redraw the prompt area while it animates (spinner, elapsed times), and only then."""
        while True:
            await asyncio.sleep(0.1)
            if self.view.waiting or self.view.tools:
                self._invalidate()

    async def run(self, offset: int, running: bool) -> None:
        self.view.running = running
        self.commands.update(await self.wolf.commands(self.sid))
        loop = asyncio.get_running_loop()
        with patch_stdout(raw=True):
            follower = loop.create_task(self._follow(offset))
            ticker = loop.create_task(self._tick())
            try:
                while not self.leaving:
                    try:
                        line = await self.prompt.prompt_async(self.message)
                    except EOFError:
                        break
                    except KeyboardInterrupt:
                        continue
                    finally:  # prompt_toolkit took SIGINT while it read keys and gave it back to nobody
                        loop.add_signal_handler(signal.SIGINT, self._on_sigint)
                    self._echo(line)
                    if not await self.handle(line):
                        break
            finally:
                follower.cancel()
                ticker.cancel()
                await asyncio.gather(follower, ticker, return_exceptions=True)
                loop.remove_signal_handler(signal.SIGINT)


async def run_lines(
    wolf: WolfClient, sid: str, offset: int, out: Console, err: Console, sink: Sink | None = None
) -> None:
    """Chat with stdin not a terminal: each line a turn, plain output; y/n/a lines answer approvals."""
    view = LiveView(sink or PlainSink(out.file), sid)
    loop = asyncio.get_running_loop()
    lines: asyncio.Queue[str | None] = asyncio.Queue()

    def read() -> None:
        for line in sys.stdin:
            loop.call_soon_threadsafe(lines.put_nowait, line.rstrip("\n"))
        loop.call_soon_threadsafe(lines.put_nowait, None)

    loop.run_in_executor(None, read)
    while (line := await lines.get()) is not None:
        line = line.strip()
        if line == "/exit":
            break
        if not line:
            continue
        try:
            if await wolf.prompt_or_leave(sid, line) is None:
                err.print(Text(NO_WORKER_NOW, "yellow"))
        except WorkflowUpdateFailedError as exc:
            err.print(Text(f"refused: {inert(str(exc.cause))}", "red"))
            continue
        followed = await _follow_turn(wolf, sid, offset, view, lines, err)
        if followed is None:
            break
        offset = followed


async def _follow_turn(
    wolf: WolfClient, sid: str, offset: int, view: LiveView, lines: asyncio.Queue[str | None], err: Console
) -> int | None:
    """One turn's events; the first Ctrl-C interrupts the turn, the second leaves (None: stdin ended)."""
    loop = asyncio.get_running_loop()
    me = asyncio.current_task()
    presses = 0

    def on_sigint() -> None:
        nonlocal presses
        presses += 1
        if presses == 1:
            err.print(Text("interrupting the turn (Ctrl-C again to leave)", "yellow"))
            loop.create_task(wolf.interrupt(sid, "Ctrl-C in wolf chat"))
        elif me is not None:
            me.cancel()

    loop.add_signal_handler(signal.SIGINT, on_sigint)
    try:
        async for position, event in wolf.events(sid, offset):
            offset = position + 1
            view.feed(event)
            if event.kind == "approval_requested" and event.call_id:
                answer = await lines.get()
                if answer is None:
                    return None
                choice = _answer(answer)
                if choice in ("yes", "always"):
                    await wolf.approve(sid, event.call_id, always=choice == "always")
                else:
                    await wolf.deny(sid, event.call_id, "denied in wolf chat")
            if event.kind in ("turn_finished", "session_closed"):
                break
    finally:
        loop.remove_signal_handler(signal.SIGINT)
    view.end_line()
    return offset
