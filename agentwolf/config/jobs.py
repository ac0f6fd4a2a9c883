"""Jobs (prompt templates with typed variables and an optional typed result) and webhook hooks.

A job's variables are bound before anything starts: an unknown, missing or mistyped variable is a
`JobError` naming every problem, so a bad `wolf run`, schedule or webhook creates nothing. Templates
use `{name}` (`{{` and `}}` for literal braces); only plain names, never attribute or index access,
so a template cannot reach into Python objects. Hook templates name fields of the request's JSON
body as `{body.a.b}`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from types import ModuleType
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agentwolf.config.suggest import listing

VarType = Literal["string", "integer", "number", "boolean"]
BusyPolicy = Literal["queue", "steer", "interrupt", "skip"]
"""What a prompt for a session whose turn is running does: wait its turn, join the running turn as
a steer, interrupt it and run next, or not be delivered at all."""

_FIELD = re.compile(r"\{\{|\}\}|\{([^{}]*)\}")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PATH = re.compile(r"body(\.[A-Za-z0-9_-]+)*")
SECRET_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class JobError(ValueError):
    """Variables that do not fit a job, or a result that does not fit its `output` schema."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


def template_fields(template: str) -> list[str]:
    """The `{...}` fields of a template, in order (escaped braces skipped)."""
    return [m.group(1) for m in _FIELD.finditer(template) if m.group(1) is not None]


def render(template: str, lookup: Mapping[str, object]) -> str:
    """Fill `{field}`s from `lookup` (booleans as `true`/`false`, objects as JSON)."""

    def fill(match: re.Match[str]) -> str:
        if match.group(1) is None:
            return match.group(0)[0]
        return _text(lookup[match.group(1)])

    return _FIELD.sub(fill, template)


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return "" if value is None else str(value)


class JobVar(_Strict):
    """A variable a job takes (`wolf run JOB --var name=value`): its type, and a default unless it is
    required."""

    type: VarType = "string"
    """`string`, `integer`, `number` or `boolean`."""
    default: str | int | float | bool | None = None
    """Its value when none is given; without one, the variable is required."""
    description: str = ""
    """What the variable means."""

    @model_validator(mode="after")
    def _default_fits(self) -> JobVar:
        if self.default is not None:
            coerce(self.type, self.default)  # raises JobError (a ValueError) with the reason
        return self


def coerce(kind: VarType, value: object) -> str | int | float | bool:
    """`value` as a `kind`: text (from a command line or a webhook) is parsed, anything else must
    already be of that type (a boolean is not a number)."""
    parsed = _parse(kind, value.strip()) if isinstance(value, str) and kind != "string" else value
    fits = {
        "string": isinstance(parsed, str),
        "integer": isinstance(parsed, int) and not isinstance(parsed, bool),
        "number": isinstance(parsed, (int, float)) and not isinstance(parsed, bool),
        "boolean": isinstance(parsed, bool),
    }[kind]
    if not fits:
        raise JobError(f"{value!r} is not a{'n' if kind == 'integer' else ''} {kind}")
    return float(parsed) if kind == "number" else parsed  # type: ignore[arg-type,return-value]


def _parse(kind: VarType, text: str) -> object:
    if kind == "boolean":
        return {"true": True, "false": False}.get(text.lower(), text)
    try:
        return int(text) if kind == "integer" else float(text)
    except ValueError:
        return text


class Job(_Strict):
    """`agent` runs `prompt` with `vars` filled in; with `output`, the result is a JSON object valid
    against that schema."""

    agent: str
    """The agent (or team) that runs it."""
    prompt: str = Field(min_length=1)
    """The prompt, with `{var}` fields (`{{` and `}}` for braces)."""
    vars: dict[str, JobVar] = {}
    """The variables `prompt` may use, by name."""
    output: dict[str, Any] | None = None
    """A JSON Schema the result must match; the result is then a JSON object."""
    description: str = ""
    """What the job does."""

    @field_validator("vars")
    @classmethod
    def _var_names(cls, value: dict[str, JobVar]) -> dict[str, JobVar]:
        bad = [name for name in value if not _NAME.fullmatch(name)]
        if bad:
            raise ValueError(f"invalid variable names {bad}: use letters, digits and '_'")
        return value

    @field_validator("output")
    @classmethod
    def _schema(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is None:
            return None
        jsonschema = _jsonschema()
        try:
            jsonschema.Draft202012Validator.check_schema(value)
        except jsonschema.SchemaError as exc:
            path = ".".join(str(p) for p in exc.path)
            raise ValueError(
                f"not a valid JSON Schema{f' at {path}' if path else ''}: {exc.message}"
            ) from None
        if value.get("type") != "object":
            raise ValueError("the result must be an object: the schema needs `type: object`")
        return value

    @model_validator(mode="after")
    def _fields_declared(self) -> Job:
        unknown = [f for f in template_fields(self.prompt) if f not in self.vars]
        if unknown:
            raise ValueError(
                f"the prompt uses undeclared variables {', '.join(unknown)} (declared: {listing(self.vars)})"
            )
        return self

    def bind(self, values: Mapping[str, object]) -> dict[str, str | int | float | bool]:
        """Every variable's typed value (defaults filled in), or a JobError naming every problem."""
        problems = [f"unknown variable {name!r}" for name in values if name not in self.vars]
        bound: dict[str, str | int | float | bool] = {}
        for name, var in self.vars.items():
            if name in values:
                try:
                    bound[name] = coerce(var.type, values[name])
                except JobError as exc:
                    problems.append(f"variable {name!r}: {exc}")
            elif var.default is not None:
                bound[name] = coerce(var.type, var.default)
            else:
                problems.append(f"missing variable {name!r} ({var.type})")
        if problems:
            known = ", ".join(f"{n}: {v.type}" for n, v in self.vars.items()) or "none"
            raise JobError("; ".join(problems) + f" (this job's variables: {known})")
        return bound

    def render(self, values: Mapping[str, object]) -> str:
        """The prompt for these variables (bound first: a bad variable starts nothing)."""
        return render(self.prompt, self.bind(values))


def _jsonschema() -> ModuleType:
    """jsonschema, loaded on first use: 40 ms that a client reading sessions never needs. A manifest
    in a workflow's payload is validated inside the sandbox, so the import is passed through there,
    as this module is (outside the sandbox that changes nothing)."""
    from temporalio import workflow

    with workflow.unsafe.imports_passed_through():
        import jsonschema
    return jsonschema


class Hook(_Strict):
    """`POST /hooks/<name>` on `wolf serve`: runs `job` with `vars` (templates over the JSON body),
    or delivers `prompt` to `session` under `when_busy`. `secret` names the variable, allowed by the
    worker policy, whose value signs the requests (HMAC-SHA256 of the raw body)."""

    job: str | None = None
    """The job to run."""
    vars: dict[str, str] = {}
    """The job's variables, as templates over the request's JSON body (`{body.pull_request.title}`)."""
    session: str | None = None
    """The session to prompt, instead of a job."""
    prompt: str | None = None
    """The prompt for `session`, a template over the body."""
    when_busy: BusyPolicy = "queue"
    """When the session's turn is running: `queue`, `steer`, `interrupt` or `skip`."""
    secret: str
    """The name of the variable (allowed by the worker's policy) whose value signs the requests
    (HMAC-SHA256 of the body)."""

    @field_validator("secret")
    @classmethod
    def _secret_name(cls, value: str) -> str:
        if not SECRET_NAME.fullmatch(value):
            raise ValueError(f"{value!r} is not a variable name: name the secret, never give its value")
        return value

    @model_validator(mode="after")
    def _one_target(self) -> Hook:
        if (self.job is None) == (self.session is None):
            raise ValueError("a hook needs exactly one of `job` or `session` (with `prompt`)")
        if self.session is not None and (self.prompt is None or self.vars):
            raise ValueError("a session hook needs `prompt` and takes no `vars`")
        if self.job is not None and self.prompt is not None:
            raise ValueError("a job hook takes `vars`, not `prompt` (the job has its prompt)")
        if self.session is not None and "/" in self.session:
            raise ValueError(f"invalid session id {self.session!r}: no '/'")
        templates = [*self.vars.values(), *([self.prompt] if self.prompt else [])]
        bad = [f for t in templates for f in template_fields(t) if not _PATH.fullmatch(f)]
        if bad:
            raise ValueError(f"hook templates read the request body only ({{body.a.b}}), not {bad}")
        return self

    def values(self, body: object) -> dict[str, str]:
        """The job variables this request gives (a field missing from the body is an error)."""
        return {name: render(template, _BodyLookup(body)) for name, template in self.vars.items()}

    def text(self, body: object) -> str:
        """The prompt this request delivers to the session."""
        return render(self.prompt or "", _BodyLookup(body))


class _BodyLookup(Mapping[str, object]):
    """`body.a.b` -> the request body's field (a JobError when the body has none)."""

    def __init__(self, body: object) -> None:
        self.body = body

    def __getitem__(self, path: str) -> object:
        value = self.body
        for key in path.split(".")[1:]:
            if isinstance(value, dict) and key in value:
                value = value[key]
            elif isinstance(value, list) and key.isdigit() and int(key) < len(value):
                value = value[int(key)]
            else:
                raise JobError(f"the request body has no {path!r}")
        return value

    def __iter__(self) -> Any:
        return iter(())

    def __len__(self) -> int:
        return 0
