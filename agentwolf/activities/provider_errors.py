"""A failed model request said in AgentWolf's words: one line naming the status, the model and the
provider's own message (not the exception's dict repr), and for a missing key the variable to set
and where, not pydantic-ai's advice to its own users."""

from __future__ import annotations

import re
from http import HTTPStatus

from pydantic_ai.exceptions import ModelHTTPError

SET_IT = "set it in the worker's environment (the local stack: export it, then `wolf up --restart`)"
_KEY_ADVICE = re.compile(r"Set the `([A-Z][A-Z0-9_]*)` environment variable")


def http_failure(exc: ModelHTTPError) -> str:
    """`the provider refused the request for model gpt-4o (401 Unauthorized): Incorrect API key`."""
    try:
        status = f"{exc.status_code} {HTTPStatus(exc.status_code).phrase}"
    except ValueError:
        status = str(exc.status_code)
    said = _provider_message(exc.body)
    line = f"the provider refused the request for model {exc.model_name} ({status})"
    if said:
        line += f": {said}"
    if exc.status_code in (401, 403):
        line += (
            "; check the API key the worker uses (host.models.providers in the manifest, or its environment)"
        )
    elif exc.suggested_model_id:
        line += f"; did you mean {exc.suggested_model_id!r}?"
    return line


def _provider_message(body: object) -> str:
    """The error's message from an OpenAI-style body (`{"message": ...}` or `{"error": {...}}`), else
    the body as text; one line."""
    if isinstance(body, dict):
        inner = body.get("error", body)
        message = inner.get("message") if isinstance(inner, dict) else inner
        body = message if message is not None else body
    return " ".join(str(body).split()) if body is not None else ""


def config_failure(exc: Exception) -> str:
    """A model that cannot be built: pydantic-ai's missing-key advice becomes which variable, where."""
    message = str(exc)
    missing = _KEY_ADVICE.search(message)
    if missing:
        name = missing.group(1)
        return (
            f"no API key for this model's provider: {name} is not set; {SET_IT}, or give the key in the"
            " manifest's host.models.providers"
        )
    return message
