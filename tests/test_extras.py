"""What a user installs is what works: no module that a plain install runs (the worker, every `wolf`
verb, the client) imports a package only an extra brings, on any path taken at import time.

The optional packages are derived, not listed: pyproject.toml's requirements, expanded through the
installed packages' own metadata, give the distributions each extra adds to a plain install, and
their RECORD files give the modules they provide. A module importing one of them at module level
(outside `if TYPE_CHECKING:` and outside a `try` that catches ImportError) makes every module that
imports it at module level need that extra; only the extra's own homes may."""

from __future__ import annotations

import ast
import importlib.metadata as metadata
import os
import subprocess
import sys
import tomllib
from functools import cache
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "agentwolf"

HOMES = {
    "serve": ("agentwolf.protocols",),
    "a2a": ("agentwolf.protocols.a2a", "agentwolf.protocols.a2a_tasks"),
}
"""The agentwolf modules (and their submodules) that may import an extra's packages at module level:
they are imported only after a verb checked the extra (cli/extras.py) or where a route is mounted."""

NEVER_HOMES = ("agentwolf.protocols.acp", "agentwolf.protocols.acp_updates")
"""Inside a home but run by a verb that needs no extra (`wolf acp`)."""


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _closure(requirements: list[str], extra: str) -> set[str]:
    """The distributions `requirements` install with `extra` asked for (markers evaluated here)."""
    seen: set[str] = set()
    todo = [(Requirement(r), extra) for r in requirements]
    while todo:
        req, asked = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": asked}):
            continue
        name = canonicalize_name(req.name)
        if name == "agentwolf":  # an extra naming others: `a2a = ["agentwolf[serve]", ...]`
            for other in req.extras:
                todo += [(Requirement(r), other) for r in _project()["optional-dependencies"][other]]
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # not for this platform, or not installed here: nothing it provides is imported
        key = (name, frozenset(req.extras))
        if key in seen:
            continue
        seen.add(key)
        for sub in dist.requires or []:
            todo += [(Requirement(sub), e) for e in ("", *req.extras)]
    return {name for name, _ in seen}


@cache
def _optional_distributions() -> dict[str, set[str]]:
    """Each extra: the distributions it installs that a plain install does not."""
    project = _project()
    core = _closure(project["dependencies"], "")
    return {
        extra: _closure(project["dependencies"] + reqs, extra) - core
        for extra, reqs in project["optional-dependencies"].items()
    }


@cache
def _providers() -> dict[str, str]:
    """Dotted module name -> the distribution whose files hold it (namespace packages have none)."""
    found: dict[str, str] = {}
    for dist in metadata.distributions():
        for file in dist.files or []:
            parts = file.parts
            if not parts or parts[0].endswith((".dist-info", ".data")) or file.suffix not in (".py", ".so"):
                continue
            stem = parts[-1].split(".")[0]
            dotted = [*parts[:-1]] if stem == "__init__" else [*parts[:-1], stem]
            if dotted and all(p.isidentifier() for p in dotted):
                found.setdefault(".".join(dotted), canonicalize_name(dist.metadata["Name"]))
    return found


def _extra_of(module: str) -> str | None:
    """The extra that must be installed for `import module` to work, if any."""
    providers = _providers()
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        if (dist := providers.get(".".join(parts[:end]))) is not None:
            return next((e for e, dists in _optional_distributions().items() if dist in dists), None)
    return None


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _guards_import_error(node: ast.Try) -> bool:
    def names(expr: ast.expr | None) -> set[str]:
        if isinstance(expr, ast.Tuple):
            return {n for e in expr.elts for n in names(e)}
        return {expr.id} if isinstance(expr, ast.Name) else set()

    return any(names(h.type) & {"ImportError", "ModuleNotFoundError"} for h in node.handlers)


def _import_time_statements(body: list[ast.stmt]) -> list[ast.Import | ast.ImportFrom]:
    """The imports that run when the module is imported (function bodies run later, when used)."""
    found: list[ast.Import | ast.ImportFrom] = []
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        elif isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                found += _import_time_statements(node.body)
            found += _import_time_statements(node.orelse)
        elif isinstance(node, ast.Try):
            if not _guards_import_error(node):
                found += _import_time_statements(node.body)
            found += _import_time_statements(node.orelse + node.finalbody)
        elif isinstance(node, ast.ClassDef | ast.With):
            found += _import_time_statements(node.body)
    return found


@cache
def _imports() -> dict[str, set[str]]:
    """Each agentwolf module -> the modules it imports at import time (absolute, dotted)."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in _import_time_statements(ast.parse(path.read_text()).body):
            if isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
                continue
            base = node.module or ""
            if node.level:
                up = package.split(".")[: package.count(".") + 2 - node.level]
                base = ".".join([*up, base]).strip(".")
            targets.add(base)
            targets |= {f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in modules}
        # importing a.b.c runs a/__init__ and a/b/__init__ first
        parents = {".".join(t.split(".")[:i]) for t in targets for i in range(1, t.count(".") + 1)}
        graph[name] = {t for t in targets | parents if t and t != name}
    return graph


def _home_of(module: str, extra: str) -> bool:
    if module.startswith(NEVER_HOMES):
        return False
    return any(module == h or module.startswith(h + ".") for h in HOMES.get(extra, ()))


def _needs(module: str) -> dict[str, list[str]]:
    """Each extra `import module` needs, with one import chain that shows why."""
    graph = _imports()
    chains: dict[str, list[str]] = {}
    seen = {module}
    frontier = [[module]]
    while frontier:
        chain = frontier.pop(0)
        for target in sorted(graph.get(chain[-1], ())):
            if target in seen:
                continue
            seen.add(target)
            if target in graph:
                frontier.append([*chain, target])
            elif (extra := _extra_of(target)) is not None:
                chains.setdefault(extra, [*chain, target])
    return chains


def test_the_extras_of_pyproject_are_derived_from_what_is_installed():
    """The derivation itself: the serve extra adds the console's templates, acp adds nothing (core)."""
    optional = _optional_distributions()
    assert {"jinja2", "ag-ui-protocol"} <= optional["serve"]
    assert optional["acp"] == set()
    assert "a2a-sdk" in optional["a2a"] and "jinja2" in optional["a2a"]  # a2a is served by `wolf serve`
    assert "opentelemetry-sdk" in optional["otel"]
    assert _extra_of("jinja2") == "serve" and _extra_of("opentelemetry.sdk.trace") == "otel"
    assert _extra_of("opentelemetry.trace") is None  # opentelemetry-api comes with the mcp SDK
    assert _extra_of("acp.schema") is None


def test_no_module_outside_an_extras_home_needs_that_extra_to_import():
    failures = [
        f"{module} needs [{extra}]: " + " -> ".join(chain)
        for module in sorted(_imports())
        for extra, chain in _needs(module).items()
        if not _home_of(module, extra)
    ]
    assert not failures, "\n".join(failures)


def test_the_guard_sees_an_unguarded_import(monkeypatch):
    """The check can fail: a worker module importing the console's template engine at module level."""
    _imports.cache_clear()
    try:
        original = _imports()
        web = "agentwolf.activities.web"
        monkeypatch.setitem(original, web, original[web] | {"jinja2"})
        needs = _needs("agentwolf.worker.bootstrap")
    finally:
        _imports.cache_clear()
    assert needs["serve"][0] == "agentwolf.worker.bootstrap" and needs["serve"][-1] == "jinja2"


BLOCKER = "import sys\nfor name in {blocked!r}:\n    sys.modules[name] = None  # as if not installed\n"


def _top_modules(distributions: set[str]) -> list[str]:
    """Every module of `distributions`, by its shortest name (none that a plain install shares)."""
    providers = _providers()
    names = sorted({m for m, d in providers.items() if d in distributions})
    return [n for n in names if not any(n.startswith(o + ".") for o in names)]


def _run_without(distributions: set[str], program: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`program` in a Python where the modules of `distributions` cannot be imported."""
    return subprocess.run(
        [sys.executable, "-c", BLOCKER.format(blocked=_top_modules(distributions)) + program],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
        env={**os.environ, "NO_COLOR": "1", "PYTHONPATH": str(ROOT), **env},
    )


def test_a_plain_install_imports_the_worker_the_cli_and_the_client():
    run = _run_without(
        set().union(*_optional_distributions().values()),
        "import agentwolf.worker.bootstrap, agentwolf.worker.__main__, agentwolf.client, agentwolf.cli\n"
        "import agentwolf.ops.local_stack, agentwolf.protocols.acp\n"
        "import jinja2\n",  # the blocker holds: this must fail
    )
    assert run.returncode == 1
    assert run.stderr.strip().splitlines()[-1] == (
        "ModuleNotFoundError: import of jinja2 halted; None in sys.modules"
    ), run.stderr


def test_a2a_without_its_extra_answers_one_sentence():
    """`wolf serve` with [serve] only: /a2a answers which install adds it."""
    program = """
from starlette.testclient import TestClient
from agentwolf.protocols.app import create_app
from agentwolf.protocols.auth import ApiKeys
from agentwolf.protocols.served import Served
served = Served(client=None, task_queue="q", keys=ApiKeys.load([], {"WOLF_API_KEYS": "k1=acme"}))
r = TestClient(create_app(served)).post("/a2a/assistant", json={}, headers={"Authorization": "Bearer k1"})
print(r.status_code, r.json()["error"]["message"])
"""
    blocked = _optional_distributions()["a2a"] - _optional_distributions()["serve"]
    assert "a2a-sdk" in blocked
    run = _run_without(blocked, program)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "501 A2A needs its extra on this server: pip install 'agentwolf[a2a]'"


def test_a_payload_store_without_its_extra_names_the_install():
    """`WOLF_PAYLOAD_STORE=s3://...` (or gs://) on a plain install: one sentence, exit 2, no traceback."""
    for extra, location in (("s3", "s3://wolf/p"), ("gcs", "gs://wolf/p")):
        program = "from agentwolf.cli import app; app(['status', 'x', '--address', '127.0.0.1:1'])"
        done = _run_without(_optional_distributions()[extra], program, WOLF_PAYLOAD_STORE=location)
        assert done.returncode == 2, done.stderr
        said = f"error: payload store {location!r} (WOLF_PAYLOAD_STORE) needs AgentWolf's {extra!r} extra"
        assert done.stderr.startswith(said), done.stderr
        assert f"pip install 'agentwolf[{extra}]'" in done.stderr and "Traceback" not in done.stderr
