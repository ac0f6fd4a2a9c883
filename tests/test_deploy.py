"""The deployment files under deploy/ (docs/features/deploy.md): the image's install script against a
wheel built from the tree, the compose file and Kubernetes manifests against their schemas (shipped
inside test packages: nothing is downloaded), the policies they mount, the dynamic config they give
Temporal, and the systemd units."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentwolf.config.policy import load_policy
from agentwolf.ops.devserver import DYNAMIC_CONFIG
from tests.support.needs import import_or_skip, in_ci

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
BUILD = DEPLOY / "image" / "build.sh"
MANIFESTS = sorted((DEPLOY / "kubernetes").glob("*.yaml"))
KUBERNETES = "1.33"
"""The Kubernetes version the manifests are checked against (kubernetes-validate ships its schemas)."""


def test_the_image_s_install_script_wants_one_agentwolf_wheel(tmp_path: Path):
    run = subprocess.run(["sh", BUILD, tmp_path, tmp_path / "venv"], capture_output=True, text=True)
    assert run.returncode == 2, run.stderr
    assert "want exactly one agentwolf-*.whl" in run.stderr
    assert not (tmp_path / "venv").exists()


@pytest.mark.skipif(not in_ci(), reason="minutes: installs every dependency from the index (CI runs it)")
@pytest.mark.timeout(1500)
def test_the_image_s_install_script_installs_the_tree_s_wheel_with_the_fleet_s_extras(tmp_path: Path):
    """What deploy/Dockerfile runs, with the same constraints, into a fresh venv (pip's cache helps)."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", tmp_path / "wheels", ROOT], check=True
    )
    prefix = tmp_path / "agentwolf"
    args = dict(
        re.findall(r"^ARG (EXTRAS|PACKAGES)=(.*)$", (DEPLOY / "Dockerfile").read_text(), re.MULTILINE)
    )
    run = subprocess.run(
        ["sh", BUILD, tmp_path / "wheels", prefix],
        # Nothing of this environment leaks in: with PYTHONPATH on this tree, pip would find agentwolf
        # "already installed" there.
        env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        | {
            "PYTHON": sys.executable,
            "PIP_CONSTRAINT": str(ROOT / ".ci" / "constraints.txt"),
            "AGENTWOLF_EXTRAS": args["EXTRAS"],
            "AGENTWOLF_PACKAGES": args["PACKAGES"],
        },
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    version = re.search(r'^version = "(.+)"$', (ROOT / "pyproject.toml").read_text(), re.MULTILINE)
    assert version and run.stdout.strip().endswith(f"wolf {version.group(1)}"), run.stdout
    # The image's extras (wolf serve with A2A, traces, an S3 payload store) and MCP server.
    imports = "import uvicorn, starlette, a2a, opentelemetry.sdk, aioboto3, agentwolf.protocols.server"
    subprocess.run([prefix / "bin" / "python", "-c", imports], check=True)
    assert (prefix / "bin" / "mcp-server-time").exists()
    assert not (prefix / "bin" / "temporal").exists()  # no embedded dev server in a fleet's image


def test_the_dockerfile_installs_with_the_script_and_copies_only_what_exists():
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert "agentwolf-build /wheels /opt/agentwolf" in dockerfile
    for source in re.findall(r"^COPY (?!--from)(.+) \S+$", dockerfile, re.MULTILINE):
        for path in source.split():
            assert (ROOT / path).exists(), path


def test_the_compose_file_is_valid_compose():
    import_or_skip("check_jsonschema", "check-jsonschema (the test group)")
    check = [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec"]
    run = subprocess.run([*check, DEPLOY / "compose" / "compose.yaml"], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def test_the_compose_schema_check_catches_a_mistake(tmp_path: Path):
    import_or_skip("check_jsonschema", "check-jsonschema (the test group)")
    compose = yaml.safe_load((DEPLOY / "compose" / "compose.yaml").read_text())
    compose["services"]["worker"]["stop_grace_period"] = {"seconds": 60}
    (tmp_path / "compose.yaml").write_text(yaml.safe_dump(compose))
    check = [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec"]
    run = subprocess.run([*check, tmp_path / "compose.yaml"], capture_output=True, text=True)
    assert run.returncode == 1 and "stop_grace_period" in run.stdout, run.stdout


def _resources() -> list[tuple[str, dict[str, Any]]]:
    return [(path.name, doc) for path in MANIFESTS for doc in yaml.safe_load_all(path.read_text()) if doc]


@pytest.mark.parametrize(("file", "resource"), _resources())
def test_the_kubernetes_manifests_are_valid(file: str, resource: dict[str, Any]):
    validation = import_or_skip("kubernetes_validate", "kubernetes-validate (the test group)")
    validation.validate(resource, KUBERNETES, strict=True)  # strict: an unknown field is an error
    if resource["kind"] != "Namespace":
        assert resource["metadata"]["namespace"] == "agentwolf", file


def test_the_kubernetes_check_catches_a_mistake():
    validation = import_or_skip("kubernetes_validate", "kubernetes-validate (the test group)")
    serve = next(doc for name, doc in _resources() if doc["kind"] == "Deployment" and name == "serve.yaml")
    container = serve["spec"]["template"]["spec"]["containers"][0]
    container["readinesProbe"] = container.pop("readinessProbe")
    with pytest.raises(validation.ValidationError, match="readinesProbe"):
        validation.validate(serve, KUBERNETES, strict=True)


def test_the_serve_pods_are_probed_on_health_and_ready_and_trust_the_ingress_s_headers():
    serve = next(doc for name, doc in _resources() if doc["kind"] == "Deployment" and name == "serve.yaml")
    (container,) = serve["spec"]["template"]["spec"]["containers"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/health"
    assert container["readinessProbe"]["httpGet"]["path"] == "/ready"
    assert {"name": "FORWARDED_ALLOW_IPS", "value": "*"} in container["env"]
    kinds = {doc["kind"] for _, doc in _resources()}
    assert {"Ingress", "NetworkPolicy"} <= kinds


def _dynamic_config(entries: dict[str, list[dict[str, Any]]]) -> dict[str, str]:
    return {key: str(value[0]["value"]).lower() for key, value in entries.items()}


def test_compose_and_the_helm_values_give_temporal_the_local_stack_s_dynamic_config():
    wanted = {key: str(value).lower() for key, value in DYNAMIC_CONFIG.items()}
    compose = yaml.safe_load((DEPLOY / "compose" / "dynamicconfig.yaml").read_text())
    helm = yaml.safe_load((DEPLOY / "helm" / "temporal-values.yaml").read_text())
    assert _dynamic_config(compose) == wanted
    assert _dynamic_config(helm["server"]["dynamicConfig"]) == wanted


def test_the_policies_compose_and_kubernetes_mount_load_and_agree(tmp_path: Path):
    compose = load_policy(DEPLOY / "compose" / "policy.yaml")
    config_map = next(doc for _, doc in _resources() if doc["kind"] == "ConfigMap")
    (tmp_path / "policy.yaml").write_text(config_map["data"]["policy.yaml"])
    kubernetes = load_policy(tmp_path / "policy.yaml")
    assert compose.model_dump(exclude={"source"}) == kubernetes.model_dump(exclude={"source"})
    assert compose.commands == ["mcp-server-time"]  # the stdio MCP server the image installs


@pytest.mark.parametrize("unit", ["agentwolf-worker.service", "agentwolf-serve.service"])
def test_the_systemd_units_verify(unit: str, tmp_path: Path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    # Point the unit at files that exist here: verify checks that ExecStart is executable.
    text = (DEPLOY / "systemd" / unit).read_text()
    env_file = re.search(r"^EnvironmentFile=(.+)$", text, re.MULTILINE)
    assert env_file
    (tmp_path / "env").write_text("TEMPORAL_ADDRESS=temporal.internal:7233\n")
    wolf = Path(sys.executable).parent / "wolf"
    text = text.replace("/opt/agentwolf/bin/wolf", str(wolf))
    text = text.replace(env_file.group(1), str(tmp_path / "env"))
    (tmp_path / unit).write_text(text)
    run = subprocess.run([analyze, "verify", tmp_path / unit], capture_output=True, text=True)
    assert run.returncode == 0 and not run.stderr.strip() and not run.stdout.strip(), run.stdout + run.stderr


def test_the_deploy_page_lists_every_search_attribute_with_its_type():
    """An operator without `wolf setup` rights (Temporal Cloud) registers them from this table."""
    from agentwolf.workflows.types import SEARCH_ATTRIBUTES

    page = (ROOT / "docs" / "features" / "deploy.md").read_text()
    table = dict(re.findall(r"^\| `(Wolf\w+)` \| (\w+) \|", page, re.MULTILINE))
    wanted = {key.name: key.indexed_value_type.name.title() for key in SEARCH_ATTRIBUTES}
    assert table == wanted
    tcld = dict(re.findall(r"--sa (Wolf\w+)=(\w+)", page))
    assert tcld == wanted


def test_the_deploy_page_s_temporal_profiles_load_strictly():
    """The profile file shape the page shows, as temporalio's envconfig reads it (unknown keys fail)."""
    from temporalio.envconfig import ClientConfig

    page = (ROOT / "docs" / "features" / "deploy.md").read_text()
    (block,) = re.findall(r"^```toml\n(.*?)^```", page, re.MULTILINE | re.DOTALL)
    profiles = ClientConfig.load(config_source=block.encode(), config_file_strict=True).profiles
    tls = profiles["prod"].tls
    assert tls and tls.client_cert and tls.client_private_key  # mTLS
    assert profiles["cloud"].api_key
