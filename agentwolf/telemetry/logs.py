"""Logging for long-running verbs: `--log-level`, `--log-format text|json`, and the ids of the work
a record belongs to (tenant, session, turn, step) on every record made while it runs.

Activities get their ids from the worker interceptor (`bind`); workflow code from `workflow.info()`
and the workflow instance's `turn_id`/`step`. A record made outside both carries none."""

from __future__ import annotations

import contextvars
import json
import logging
from typing import Literal

from temporalio import workflow

LogFormat = Literal["text", "json"]
IDS = ("tenant", "session", "turn", "step")
_ids: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar("wolf_log_ids", default=None)


def ids_of(workflow_id: str, turn: object = None, step: object = None) -> dict[str, str]:
    """The ids a session's workflow id (`wolf/<tenant>/<session>`) and position give."""
    parts = workflow_id.split("/", 2)
    found = {"tenant": parts[1], "session": parts[2]} if len(parts) == 3 else {"session": workflow_id}
    if turn is not None:
        found["turn"] = str(turn)
    if step is not None:
        found["step"] = str(step)
    return found


def bind(ids: dict[str, str]) -> contextvars.Token[dict[str, str] | None]:
    """Records made in this context (an activity's task and the tasks it starts) carry `ids`."""
    return _ids.set(ids)


def unbind(token: contextvars.Token[dict[str, str] | None]) -> None:
    _ids.reset(token)


def _current() -> dict[str, str]:
    if workflow.in_workflow():
        instance = workflow.instance()
        return ids_of(
            workflow.info().workflow_id, getattr(instance, "turn_id", None), getattr(instance, "step", None)
        )
    return _ids.get() or {}


class IdsFilter(logging.Filter):
    """Puts `tenant`, `session`, `turn` and `step` on each record (None when unknown)."""

    def filter(self, record: logging.LogRecord) -> bool:
        ids = _current()
        for name in IDS:
            if not hasattr(record, name):
                setattr(record, name, ids.get(name))
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the known ids, a request's fields
    (`http`: method, path, status, duration_ms, key_id; `wolf serve`'s access log), and the exception."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update({name: value for name in IDS if (value := getattr(record, name, None)) is not None})
        if (http := getattr(record, "http", None)) is not None:
            line["http"] = http
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


class TextFormatter(logging.Formatter):
    """The plain format, with the known ids in brackets after the logger's name."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s%(ids)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        known = [f"{name}={value}" for name in IDS if (value := getattr(record, name, None)) is not None]
        record.ids = f" [{' '.join(known)}]" if known else ""
        return super().format(record)


def configure(level: str = "INFO", fmt: LogFormat = "text") -> None:
    """The root logger writes to stderr at `level` in `fmt`; called once by each long-running verb."""
    handler = logging.StreamHandler()
    handler.addFilter(IdsFilter())
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
