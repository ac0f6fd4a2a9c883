"""pydantic-ai agent spec files (what `Agent.from_file` reads) as AgentWolf agents: named in
`agents_from`, read with pydantic-ai's own `AgentSpec`, so a file written for pydantic-ai runs here
unchanged: its model, instructions, model settings and capabilities (docs/guides/capabilities.md).

What a spec says that a session has no use for is left aside with a warning: `deps_schema` (a
session's deps are its own), `retries`, `end_strategy`, `tool_timeout`, `metadata`; `output_schema`
belongs to a job (`jobs.<name>.output`).
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any


class SpecFileError(ValueError):
    """A spec file that cannot be used; the message names the file (an AgentFileError to callers)."""


LEFT_ASIDE = ("deps_schema", "output_schema", "retries", "tool_timeout", "metadata")
_NAME = re.compile(r"[^A-Za-z0-9_.-]+")


def parse_spec_file(path: Path) -> tuple[str, dict[str, Any]]:
    """(name, the agent as manifest data): `name` from the spec, else the file's stem."""
    from pydantic import ValidationError
    from pydantic_ai.agent.spec import AgentSpec

    try:
        spec = AgentSpec.from_file(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecFileError(f"{path}: cannot read it: {exc}") from None
    except (ValidationError, ValueError) as exc:
        raise SpecFileError(f"{path}: not a pydantic-ai agent spec: {' '.join(str(exc).split())}") from None
    ignored = [key for key in LEFT_ASIDE if getattr(spec, key)]
    if ignored:
        warnings.warn(f"{path}: left aside in a session: {', '.join(ignored)}", stacklevel=2)
    instructions = spec.instructions if isinstance(spec.instructions, list) else [spec.instructions]
    config: dict[str, Any] = {
        "description": str(spec.description or ""),
        "instructions": "\n\n".join(str(i) for i in instructions if i),
        "file": str(path),
        "capabilities": [_spec_data(c.name, c.arguments) for c in spec.capabilities],
    }
    if spec.model:
        config["model"] = spec.model
    if spec.model_settings:
        config["model_settings"] = dict(spec.model_settings)
    return _NAME.sub("-", spec.name or path.stem).strip("-.") or path.stem, config


def _spec_data(name: str, arguments: Any) -> Any:
    """A capability as the manifest writes it: the spec's own short forms."""
    if arguments is None:
        return name
    if isinstance(arguments, tuple):
        return {name: arguments[0]}
    return {name: arguments}
