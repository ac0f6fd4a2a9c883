"""Tool permission rules: precedence case by case (deny > confirm > allow, then the default)."""

from __future__ import annotations

import pytest

from agentwolf.config.manifest import Permissions


def perms(*rules: tuple[str, str] | tuple[str, str, dict[str, str]], default: str = "allow") -> Permissions:
    return Permissions.model_validate(
        {
            "default": default,
            "rules": [{"tool": r[0], "action": r[1], "args": r[2] if len(r) > 2 else {}} for r in rules],
        }
    )


@pytest.mark.parametrize(
    ("permissions", "tool", "args", "expected"),
    [
        (perms(), "anything", {}, "allow"),
        (perms(default="confirm"), "anything", {}, "confirm"),
        (perms(default="deny"), "anything", {}, "deny"),
        (perms(("rm_.*", "deny")), "rm_file", {}, "deny"),
        (perms(("rm_.*", "deny")), "list_files", {}, "allow"),
        (perms(("rm", "deny")), "rm_file", {}, "allow"),  # full match, not search
        # several rules match: deny beats confirm beats allow, whatever their order
        (perms(("write_.*", "allow"), ("write_file", "confirm")), "write_file", {}, "confirm"),
        (perms(("write_file", "confirm"), ("write_.*", "allow")), "write_file", {}, "confirm"),
        (perms((".*", "allow"), ("write_.*", "confirm"), ("write_file", "deny")), "write_file", {}, "deny"),
        (perms(("write_file", "deny"), (".*", "allow")), "write_file", {}, "deny"),
        # an explicit allow beats a stricter default
        (perms(("read_.*", "allow"), default="confirm"), "read_file", {}, "allow"),
        # argument patterns
        (perms(("shell", "deny", {"cmd": "rm .*"})), "shell", {"cmd": "rm -rf /"}, "deny"),
        (perms(("shell", "deny", {"cmd": "rm .*"})), "shell", {"cmd": "ls"}, "allow"),
        (perms(("shell", "deny", {"cmd": "rm .*"})), "shell", {}, "allow"),  # missing argument: no match
        (
            perms(("fetch", "confirm", {"url": "https?://(?!internal).*"})),
            "fetch",
            {"url": "https://x.org"},
            "confirm",
        ),
        (perms(("add", "confirm", {"a": "[0-9]+"})), "add", {"a": 12}, "confirm"),  # values match as text
    ],
)
def test_precedence(permissions, tool, args, expected):
    assert permissions.decide(tool, args) == expected


def test_bad_regex_is_a_config_error():
    from agentwolf.config import ManifestError, parse_manifest

    with pytest.raises(ManifestError, match=r"f.yaml:4: host.permissions.rules.0.tool"):
        parse_manifest(
            "host:\n  permissions:\n    rules:\n      - {tool: '(', action: deny}\n", source="f.yaml"
        )
