"""MkDocs hook: the reference pages that come from the code, generated at every build so they cannot
drift: the CLI reference from the typer app (typer's own `utils docs`) and the manifest reference
from `wolf config schema`. Both run the installed `agentwolf` offline, as a user would."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

CLI_INTRO = """\
Generated from the `wolf` program itself (`typer agentwolf.cli utils docs`), so it lists every
verb and option of the installed version. `wolf VERB --help` prints the same text.

Conventions every verb keeps:

- Output: every verb but `chat`, `dev`, `serve`, `worker`, `mcp` and `acp` takes `--json` (`-j`) and
  then prints exactly one JSON document on stdout; streams (`follow --json`, `submit --follow --json`)
  print JSON Lines, the result last. `NO_COLOR` and non-terminal output are respected. Errors are one
  sentence on stderr.
- Exit codes: 0 ok, 1 the session failed, 2 usage or config error (bad option value, empty prompt,
  unknown session), 3 Temporal or a worker unreachable, 130 interrupted.
- Temporal: every verb that talks to it takes `--address`, `--namespace`/`-n`, `--profile`,
  `--tls/--no-tls` and `--api-key`, read as every Temporal tool reads them
  ([Deploying to production](../features/deploy.md#connecting-to-temporal)). When none names a
  server, verbs use the embedded local stack, and `submit`, `chat`, `run`, `config push`,
  `schedule create`, `serve`, `mcp` and `acp` start it.
- Durations, wherever a verb takes one (`payloads gc --older-than`, `schedule create --every` and
  `--jitter`, `usage --since`): `90s`, `15m`, `1h30m`, `7d`, `2w`, `250ms`, or ISO 8601 (`PT8H`).
- A verb that cannot reach Temporal says why (connection refused, unknown host, TLS, credentials)
  and what to do (`wolf up`, `--address`/`TEMPORAL_ADDRESS`), exit 3.
- A verb that needs a worker and finds none polling says so, with the fix (`wolf up` or
  `wolf worker`). `-h` is `--help`; every verb's help (a group's: its verbs') ends with an example;
  `wolf --install-completion` installs shell completion.

"""

MANIFEST_INTRO = """\
# Manifest reference

Generated from `wolf config schema`, the manifest's JSON Schema. Save it for editor completion and
checks: `wolf config schema > wolf.schema.json`, then put
`# yaml-language-server: $schema=./wolf.schema.json` atop `wolf.yaml`. The guides explain each
section: [configuration](../guides/configuration.md), [limits and budgets](../features/budgets.md),
[approvals](../features/approvals.md), [jobs](../features/jobs.md).

A manifest has up to {count} top-level keys ({keys}). `${{VAR}}` and `${{VAR:-default}}` may appear in
any string; the worker resolves them at the moment of use, within its [policy](../features/security.md).

"""


def _run(*args: str) -> str:
    return subprocess.run([sys.executable, *args], check=True, capture_output=True, text=True).stdout


def cli_reference() -> str:
    docs = _run("-m", "typer", "agentwolf.cli", "utils", "docs", "--name", "wolf", "--title", "CLI")
    title, _, body = docs.partition("\n")
    return f"{title} reference\n\n{CLI_INTRO}{body}"


def _anchor(name: str) -> str:
    return name.lower()


def _type(schema: dict[str, Any]) -> str:
    """A property's type in words, with links to the objects it names."""
    if ref := schema.get("$ref"):
        name = ref.rsplit("/", 1)[-1]
        return f"[{name}](#{_anchor(name)})"
    if "anyOf" in schema:
        return " or ".join(_type(s) for s in schema["anyOf"])
    if "enum" in schema:
        return " \\| ".join(f"`{v}`" for v in schema["enum"])
    if "const" in schema:
        return f"`{schema['const']}`"
    kind = schema.get("type", "any")
    if kind == "array":
        return f"list of {_type(schema.get('items', {}))}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return f"map of name to {_type(schema['additionalProperties'])}"
    if schema.get("format") == "duration":
        return "duration (seconds or ISO 8601)"
    return str(kind)


def _default(schema: dict[str, Any], required: bool) -> str:
    if required:
        return "required"
    if "default" not in schema:
        return ""
    value = json.dumps(schema["default"])
    return f"`{value}`" if len(value) <= 40 else "see its fields"


def _bounds(schema: dict[str, Any]) -> str:
    words = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">", "minLength": "length >=",
             "minItems": "items >="}  # fmt: skip
    parts = [f"{word} {schema[key]}" for key, word in words.items() if key in schema]
    for option in schema.get("anyOf", []):
        parts += [f"{word} {option[key]}" for key, word in words.items() if key in option]
    return ", ".join(parts)


def schema_section(name: str, schema: dict[str, Any], level: str) -> str:
    lines = [f"{level} {name}", ""]
    if description := schema.get("description"):
        lines += [description.strip(), ""]
    required = set(schema.get("required", []))
    lines += ["| key | type | default | notes |", "|---|---|---|---|"]
    for key, prop in schema.get("properties", {}).items():
        notes = " ".join(filter(None, [_bounds(prop), prop.get("description", "")]))
        notes = notes.replace("\n", " ").replace("|", "\\|")
        lines.append(f"| `{key}` | {_type(prop)} | {_default(prop, key in required)} | {notes} |")
    return "\n".join(lines) + "\n"


def manifest_reference() -> str:
    wolf = ("-c", "from agentwolf.cli import app; app()")  # `wolf`, with this Python
    schema = json.loads(_run(*wolf, "config", "schema", "--json"))
    keys = ", ".join(f"`{k}`" for k in schema["properties"])
    parts = [
        MANIFEST_INTRO.format(count=len(schema["properties"]), keys=keys),
        schema_section("Top level", schema, "##"),
    ]
    parts += [schema_section(name, definition, "##") for name, definition in sorted(schema["$defs"].items())]
    return "\n".join(parts)


def on_files(files: Files, config: MkDocsConfig) -> Files:
    files.append(File.generated(config, "reference/cli.md", content=cli_reference()))
    files.append(File.generated(config, "reference/manifest.md", content=manifest_reference()))
    return files
