"""What a Chat Completions or Responses request may ask of the model, checked as OpenAI checks it.

Each parameter is applied to the turn it asks for (a `TurnSettings`), accepted without effect
(bookkeeping such as `metadata`, which changes no answer; `user` names whom a new session is for,
targeting.owner_of), or refused with OpenAI's 400
(`invalid_request_error`, the parameter in `param`): a value out of range, an unknown parameter
(OpenAI's own "Unrecognized request argument"), or one that would change the answer's shape in a
way a turn cannot give (`n > 1`, log probabilities, client-side tools)."""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import PydanticCustomError

from agentwolf.protocols.served import ApiError
from agentwolf.workflows.turn_settings import AnswerFormat, TurnSettings

Effort = Literal["none", "minimal", "low", "medium", "high", "xhigh"]


def _unless(ok: Any, why: str) -> AfterValidator:
    """Refuse a value `ok` does not accept, saying `why` (code `unsupported_value`)."""

    def check(value: Any) -> Any:
        if value is not None and not ok(value):
            raise PydanticCustomError("unsupported_value", why)
        return value

    return AfterValidator(check)


def _unset(why: str) -> AfterValidator:
    """Refuse any value but an empty or false one, saying `why`."""
    return _unless(lambda v: not v, why)


CLIENT_TOOLS = "client-side tools are not supported: the agent's own tools run on the server"
TEXT_ONLY = "a turn's answer is text"
NoChoices = Annotated[int | None, _unless(lambda n: n == 1, "only n=1 is supported: a turn gives one answer")]
NoLogprobs = Annotated[Any, _unset(f"log probabilities are not returned: {TEXT_ONLY}")]
NoClientTools = Annotated[Any, _unset(CLIENT_TOOLS)]
AutoTools = Annotated[Any, _unless(lambda v: v in ("auto", "none"), CLIENT_TOOLS)]
NoVerbosity = Annotated[Any, _unset("verbosity is not supported: the agent's instructions decide")]


def _schema(value: dict[str, Any]) -> dict[str, Any]:
    """A JSON Schema the provider can take (checked here: a bad one would fail the turn later)."""
    import jsonschema

    try:
        jsonschema.Draft202012Validator.check_schema(value)
    except jsonschema.SchemaError as exc:
        raise ValueError(f"not a valid JSON Schema: {exc.message}") from None
    return value


Schema = Annotated[dict[str, Any], AfterValidator(_schema)]
Name = Annotated[str, Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")]


class _Format(BaseModel):
    model_config = ConfigDict(extra="forbid")

    def answer(self) -> AnswerFormat | None:
        return None


class _Text(_Format):
    type: Literal["text"]


class _JsonObject(_Format):
    type: Literal["json_object"]

    def answer(self) -> AnswerFormat:
        return AnswerFormat(type="json_object")


class _SchemaSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: Name
    description: str | None = None
    json_schema: Schema = Field({"type": "object"}, alias="schema")
    strict: bool | None = None

    def answer(self) -> AnswerFormat:
        return AnswerFormat(
            type="json_schema",
            json_schema=self.json_schema,
            name=self.name,
            description=self.description,
            strict=self.strict,
        )


class _ChatJsonSchema(_Format):
    """Chat Completions: `{"type": "json_schema", "json_schema": {name, schema, strict}}`."""

    type: Literal["json_schema"]
    json_schema: _SchemaSpec

    def answer(self) -> AnswerFormat:
        return self.json_schema.answer()


class _ResponsesJsonSchema(_SchemaSpec):
    """Responses: `text.format` is flat, `{"type": "json_schema", name, schema, strict}`."""

    type: Literal["json_schema"]


ChatFormat = Annotated[_Text | _JsonObject | _ChatJsonSchema, Field(discriminator="type")]
ResponsesFormat = Annotated[_Text | _JsonObject | _ResponsesJsonSchema, Field(discriminator="type")]


class _Common(BaseModel):
    """Parameters both APIs share. Those the handlers read themselves are typed `Any` here."""

    model_config = ConfigDict(extra="forbid")

    model: Any = None
    stream: Any = None
    stream_options: Any = None
    store: Any = None
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    parallel_tool_calls: bool | None = None
    tools: Any = None
    tool_choice: AutoTools = None
    user: str | None = None
    """The end user a new session is for (its owner, whose long-term memory it uses, within the key),
    unless the key names its own subject."""
    # Accepted without effect: bookkeeping that changes no answer.
    metadata: dict[str, str] | None = None
    service_tier: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: str | None = None

    def _turn(self, **more: Any) -> TurnSettings | None:
        """The turn's settings; None when the request set none (prompts carry no empty settings)."""
        settings = TurnSettings(
            temperature=self.temperature,
            top_p=self.top_p,
            parallel_tool_calls=self.parallel_tool_calls,
            **more,
        )
        return settings if settings.model_dump(exclude_none=True) else None


def _thinking(effort: Effort | None) -> bool | str | None:
    return False if effort == "none" else effort


class ChatRequest(_Common):
    messages: Any = None
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    stop: str | list[str] | None = None
    seed: int | None = None
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    logit_bias: dict[str, Annotated[int, Field(ge=-100, le=100)]] | None = None
    response_format: ChatFormat | None = None
    reasoning_effort: Effort | None = None
    n: NoChoices = None
    logprobs: NoLogprobs = None
    top_logprobs: NoLogprobs = None
    functions: NoClientTools = None
    function_call: AutoTools = None
    modalities: Annotated[Any, _unless(lambda v: v == ["text"], f"only text output: {TEXT_ONLY}")] = None
    audio: Annotated[Any, _unset(f"audio output is not supported: {TEXT_ONLY}")] = None
    prediction: Annotated[Any, _unset("predicted outputs are not supported")] = None
    web_search_options: Annotated[Any, _unset("web search is one of the agent's own tools, if it has it")] = (
        None
    )
    verbosity: NoVerbosity = None

    @field_validator("stop")
    @classmethod
    def _up_to_four(cls, value: str | list[str] | None) -> str | list[str] | None:
        if isinstance(value, list) and len(value) > 4:
            raise ValueError("at most 4 stop sequences")
        return value

    def turn_settings(self, instructions: str | None) -> TurnSettings | None:
        stop = [self.stop] if isinstance(self.stop, str) else self.stop
        return self._turn(
            max_tokens=self.max_completion_tokens or self.max_tokens,
            stop_sequences=stop,
            seed=self.seed,
            presence_penalty=self.presence_penalty,
            frequency_penalty=self.frequency_penalty,
            logit_bias=self.logit_bias,
            thinking=_thinking(self.reasoning_effort),
            answer_format=self.response_format.answer() if self.response_format else None,
            instructions=instructions,
        )


class _Reasoning(BaseModel):
    model_config = ConfigDict(extra="ignore")  # `summary`, `generate_summary`: how it is shown

    effort: Effort | None = None


class _TextOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: ResponsesFormat | None = None
    verbosity: NoVerbosity = None


class ResponsesRequest(_Common):
    input: Any = None
    instructions: Any = None
    previous_response_id: Any = None
    background: Any = None
    max_output_tokens: int | None = Field(None, ge=1)
    text: _TextOptions | None = None
    reasoning: _Reasoning | None = None
    include: list[str] | None = None
    truncation: Literal["auto", "disabled"] | None = None
    top_logprobs: NoLogprobs = None
    max_tool_calls: Annotated[
        Any, _unset("the agent's limits bound its tool calls (limits: in the manifest)")
    ] = None
    conversation: Annotated[Any, _unset("conversations are sessions here: use previous_response_id")] = None
    prompt: Annotated[Any, _unset("prompt templates are not supported: send the input")] = None
    context_management: Annotated[Any, _unset("the session manages its own context")] = None

    def turn_settings(self, instructions: str | None) -> TurnSettings | None:
        answer = self.text.format if self.text else None
        return self._turn(
            max_tokens=self.max_output_tokens,
            thinking=_thinking(self.reasoning.effort if self.reasoning else None),
            answer_format=answer.answer() if answer else None,
            instructions=instructions,
        )


R = TypeVar("R", ChatRequest, ResponsesRequest)


def checked(kind: type[R], body: dict[str, Any]) -> R:
    """The request's parameters, or OpenAI's 400 naming the first one that cannot apply."""
    try:
        return kind.model_validate(body)
    except ValidationError as exc:
        error = exc.errors()[0]
        param = _param(error["loc"], body)
        if error["type"] == "extra_forbidden":
            raise ApiError(
                400, f"Unrecognized request argument supplied: {param}", code="unknown_parameter", param=param
            ) from None
        code = "unsupported_value" if error["type"] == "unsupported_value" else "invalid_value"
        message = error["msg"].removeprefix("Value error, ")
        raise ApiError(400, f"Invalid '{param}': {message}", code=code, param=param) from None


def _param(loc: tuple[int | str, ...], body: Any) -> str:
    """The parameter an error is about, dotted as OpenAI names it: pydantic puts a tagged union's tag
    in `loc` (`response_format.json_schema.json_schema.schema`), which the body does not have."""
    parts: list[str] = []
    here, tagged = body, False
    for part in loc:
        if not tagged and isinstance(here, dict) and part == here.get("type"):
            tagged = True
            continue
        parts.append(str(part))
        tagged = False
        here = here.get(part) if isinstance(here, dict) else None
    return ".".join(parts)
