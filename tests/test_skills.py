"""Skills on real folders: SKILL.md parsing, path/URI safety, limits, merging and the catalog.

Most cases are hostile input; each asserts what happens (a refusal naming the problem, a skipped
skill with a recorded problem, or bytes instead of text), so a regression cannot pass quietly.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from agentwolf.extensions.safety import (
    MAX_FILE_BYTES,
    MAX_FILES_PER_SKILL,
    MAX_SKILL_MD_BYTES,
    parse_skill_uri,
    safe_path,
)
from agentwolf.extensions.skills import LocalSkillRoot, SkillManagerCap
from agentwolf.extensions.skills_md import ParsedSkill, parse_skill_md
from agentwolf.extensions.types import (
    CommandResource,
    ExtensionError,
    SkillEntry,
    SkillFile,
    SkillResource,
)
from tests.support.skills import skill_md, write_skill

MIB = 1024 * 1024


def parse(text: str, folder: str | None = "review") -> ParsedSkill:
    return parse_skill_md(text, folder=folder, origin="local:/skills", uri="skill://review/SKILL.md")


def sparse(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as handle:
        handle.truncate(size)


# --- safe_path ----------------------------------------------------------------------------------

TRAVERSAL = [
    ("../x", "'..'"),
    ("a/../../x", "'..'"),
    ("./../x", "'..'"),
    ("..", "'..'"),
    ("a/..", "'..'"),
    ("/etc/passwd", "absolute"),
    ("//server/share", "absolute"),
    ("~/x", "absolute"),
    ("~root/.ssh/id_rsa", "absolute"),
    ("C:\\x", "backslash"),
    ("C:/x", "absolute"),
    ("c:x", "absolute"),
    ("a\\..\\..\\x", "backslash"),
    ("a\x00b", "NUL"),
    ("%00", "NUL"),
    ("%5c..%5cx", "backslash"),
    ("%2e%2e/x", "'..'"),
    ("%2e%2e%2fx", "'..'"),
    ("%2E%2E%2Fx", "'..'"),
    ("..%2fx", "'..'"),
    ("a/%2e%2e/%2e%2e/x", "'..'"),
    ("%2fetc%2fpasswd", "absolute"),
    ("%7e/x", "absolute"),
    ("", "empty"),
]


@pytest.mark.parametrize(("relative", "problem"), TRAVERSAL)
def test_safe_path_refuses_escapes(tmp_path: Path, relative: str, problem: str) -> None:
    with pytest.raises(ExtensionError, match=problem) as caught:
        safe_path(tmp_path, relative)
    assert repr(relative) in str(caught.value)


@pytest.mark.parametrize(
    ("relative", "literal"),
    [
        ("....//", "...."),
        ("%252e%252e%252fx", "%2e%2e%2fx"),
        ("%252e%252e/%252e%252e/x", "%2e%2e/%2e%2e/x"),
        ("a/./b", "a/b"),
        ("notes%20v2.md", "notes v2.md"),
    ],
)
def test_safe_path_decodes_once_and_stays_inside(tmp_path: Path, relative: str, literal: str) -> None:
    resolved = safe_path(tmp_path, relative)
    assert resolved == (tmp_path / literal).resolve()
    assert resolved.is_relative_to(tmp_path.resolve())


def test_safe_path_follows_symlinks_only_inside(tmp_path: Path) -> None:
    root, outside = tmp_path / "skill", tmp_path / "outside"
    (root / "docs").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    (root / "docs" / "real.md").write_text("ok")
    (root / "alias.md").symlink_to(root / "docs" / "real.md")
    (root / "leak.txt").symlink_to(outside / "secret.txt")
    (root / "leakdir").symlink_to(outside, target_is_directory=True)

    assert safe_path(root, "alias.md") == (root / "docs" / "real.md").resolve()
    with pytest.raises(ExtensionError, match="leads outside"):
        safe_path(root, "leak.txt")
    with pytest.raises(ExtensionError, match="leads outside"):
        safe_path(root, "leakdir/secret.txt")


# --- parse_skill_uri ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("uri", "problem"),
    [
        ("http://example.test/SKILL.md", "unsupported URI"),
        ("file:///etc/passwd", "unsupported URI"),
        ("mcp://server/resource", "unsupported URI"),
        ("skill:/review/SKILL.md", "unsupported URI"),
        ("SKILL://review/SKILL.md", "unsupported URI"),
        ("review/SKILL.md", "unsupported URI"),
        ("skill://", "empty"),
        ("skill://../x", "'..'"),
        ("skill://review/../../etc/passwd", "'..'"),
        ("skill://review/%2e%2e/%2e%2e/etc/passwd", "'..'"),
        ("skill:///etc/passwd", "absolute"),
        ("skill://~/x", "absolute"),
        ("skill://review\\..\\x", "backslash"),
        ("skill://review/%00", "NUL"),
        ("skill://review//x", "empty or '.'"),
        ("skill://./review/SKILL.md", "empty or '.'"),
    ],
)
def test_parse_skill_uri_refuses(uri: str, problem: str) -> None:
    with pytest.raises(ExtensionError, match=problem):
        parse_skill_uri(uri)


@pytest.mark.parametrize(
    ("uri", "parts"),
    [
        ("skill://review/SKILL.md", ("review", "SKILL.md")),
        ("skill://team/review/SKILL.md", ("team/review", "SKILL.md")),
        ("skill://review", ("review", "SKILL.md")),
        ("skill://review/", ("review", "SKILL.md")),
        ("skill://review/notes.md", ("review", "notes.md")),
        ("skill://review/%252e%252e", ("review", "%2e%2e")),
    ],
)
def test_parse_skill_uri(uri: str, parts: tuple[str, str]) -> None:
    assert parse_skill_uri(uri) == parts


# --- parse_skill_md -----------------------------------------------------------------------------

BILLION_LAUGHS = skill_md(
    "name: review\ndescription: lol\n"
    'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    + "".join(
        f"{name}: &{name} [{','.join([f'*{prev}'] * 9)}]\n"
        for prev, name in zip("abcdefgh", "bcdefghi", strict=True)
    )
)

MALFORMED = [
    pytest.param("# Review\nNo frontmatter.", "must start with a '---'", id="missing-frontmatter"),
    pytest.param("---\nname: review\ndescription: x\n", "never closed", id="unclosed"),
    pytest.param(skill_md("- name\n- description"), "mapping of keys to values, not list", id="list"),
    pytest.param(skill_md("just some text"), "mapping of keys to values, not str", id="scalar"),
    pytest.param("---\n---\nbody", "mapping of keys to values, not NoneType", id="empty-frontmatter"),
    pytest.param(skill_md("name: Review\ndescription: x"), "name 'Review' is invalid", id="uppercase"),
    pytest.param(skill_md("name: my_review\ndescription: x"), "name 'my_review' is invalid", id="underscore"),
    pytest.param(
        skill_md("name: re--view\ndescription: x"), "name 're--view' is invalid", id="double-hyphen"
    ),
    pytest.param(skill_md("name: -review\ndescription: x"), "name '-review' is invalid", id="leading-hyphen"),
    pytest.param(
        skill_md("name: review-\ndescription: x"), "name 'review-' is invalid", id="trailing-hyphen"
    ),
    pytest.param(skill_md(f"name: {'a' * 65}\ndescription: x"), "is invalid: use 1-64", id="65-char-name"),
    pytest.param(skill_md("name: ''\ndescription: x"), "name '' is invalid", id="empty-name"),
    pytest.param(
        skill_md("name: 123\ndescription: x"), "name must be a string, but it is a int", id="int-name"
    ),
    pytest.param(skill_md("name: [review]\ndescription: x"), "name must be a string", id="list-name"),
    pytest.param(
        skill_md("name: other\ndescription: x"), "'other' does not match its folder 'review'", id="folder"
    ),
    pytest.param(
        skill_md("name: review"), "description must be a string, but it is missing", id="no-description"
    ),
    pytest.param(
        skill_md("name: review\ndescription: '  '"), "description must be 1-1024", id="blank-description"
    ),
    pytest.param(
        skill_md(f"name: review\ndescription: {'d' * 1025}"),
        "1-1024 characters, not 1025",
        id="long-description",
    ),
    pytest.param(
        skill_md(f"name: review\ndescription: x\ncompatibility: {'c' * 501}"),
        "compatibility must be at most 500",
        id="long-compatibility",
    ),
    pytest.param(
        skill_md("name: review\ndescription: x\nmetadata:\n  version: 1.0"),
        "metadata must map strings to strings",
        id="metadata-float",
    ),
    pytest.param(
        skill_md("name: review\ndescription: x\nmetadata: [a, b]"),
        "metadata must be a mapping",
        id="metadata-list",
    ),
    pytest.param(skill_md("name: review\n\tdescription: x"), "tabs are not allowed", id="tab-indent"),
    pytest.param(skill_md("name: review\ndescription: [unclosed"), "not valid YAML", id="yaml-syntax"),
    pytest.param(
        skill_md("name: review\ndescription: !!python/object/apply:os.system ['true']"),
        "not valid YAML",
        id="python-tag",
    ),
    pytest.param(BILLION_LAUGHS, "anchors and aliases are not allowed", id="billion-laughs"),
    pytest.param(
        skill_md("name: review\ndescription: &d x\nlicense: *d"), "anchors and aliases", id="simple-alias"
    ),
    pytest.param(
        skill_md("name: review\ndescription: x\nname: other"),
        "duplicate frontmatter keys: name",
        id="dup-key",
    ),
    pytest.param(
        skill_md(f"name: review\ndescription: x\ndeep: {'[' * 3000}{']' * 3000}"),
        "nested more than 20 levels deep",
        id="deep-flow-nesting",
    ),
    pytest.param(
        skill_md("name: review\ndescription: x\n" + "".join(" " * i + "a:\n" for i in range(3000))),
        "nested more than 20 levels deep",
        id="deep-block-nesting",
    ),
    pytest.param(
        skill_md("name: review\ndescription: x\nallowed-tools: {read: yes}"),
        "allowed-tools must be",
        id="tools-map",
    ),
    pytest.param(
        skill_md("name: review\ndescription: x\nallowed-tools: [read, 3]"),
        "allowed-tools must be",
        id="tools-int",
    ),
    pytest.param(
        skill_md("name: review\ndescription: x\nuser-invocable: maybe"),
        "user-invocable must be true or false",
        id="user-invocable",
    ),
    pytest.param(
        skill_md("name: review\ndescription: x\nmcp-servers: [git]"), "mcp-servers must map", id="mcp-list"
    ),
    pytest.param(
        skill_md(
            "name: review\ndescription: x\nmcp-servers:\n  git:\n    command: git\n    url: http://h/mcp"
        ),
        "mcp-servers.git is invalid: settings: Value error, an MCP server needs exactly one",
        id="mcp-two-transports",
    ),
    pytest.param(
        skill_md("name: review\ndescription: x\nmcp-servers:\n  git:\n    command: git\n    shell: true"),
        "mcp-servers.git is invalid: shell: Extra inputs",
        id="mcp-unknown-field",
    ),
]


@pytest.mark.timeout(60)  # refused, never stuck (how fast is not a test's question on a shared machine)
@pytest.mark.parametrize(("text", "problem"), MALFORMED)
def test_malformed_skill_md_is_refused(text: str, problem: str) -> None:
    with pytest.raises(ExtensionError, match=problem) as caught:
        parse(text)
    assert str(caught.value).startswith("skill://review/SKILL.md: ")


def test_parse_full_frontmatter() -> None:
    parsed = parse(
        "\ufeff"
        + skill_md(
            "name: review\n"
            "description: >\n  Reviews a change\n  for bugs.\n"
            "license: MIT\n"
            "compatibility: needs git\n"
            "metadata:\n  author: wolf\n  version: '1.0'\n"
            "allowed-tools: Read, Grep Bash(git diff:*)\n"
            "mcp-servers:\n  git:\n    command: uvx\n    args: [mcp-server-git]\n"
            "user-invocable: false\n"
            "argument-hint: [pr-number]\n"
            "model: opus\n"
            "hooks: {}\n"
            "colour: blue\n",
            body="\n# Review\nSteps.\n",
        )
    )
    entry = parsed.entry
    assert entry == SkillEntry(
        name="review",
        description="Reviews a change for bugs.",
        uri="skill://review/SKILL.md",
        origin="local:/skills",
        allowed_tools=("Read", "Grep", "Bash(git diff:*)"),
        mcp_servers=("git",),
        metadata={"author": "wolf", "version": "1.0"},
    )
    assert parsed.body == "# Review\nSteps.\n"
    assert parsed.mcp_servers["git"].command == "uvx"
    assert parsed.mcp_servers["git"].args == ["mcp-server-git"]
    assert parsed.user_invocable is False
    assert parsed.argument_hint == "[pr-number]"
    assert (parsed.license, parsed.compatibility) == ("MIT", "needs git")
    assert parsed.warnings == (
        "'user-invocable' is a Claude Code key, not in the Agent Skills spec (used for slash commands)",
        "'argument-hint' is a Claude Code key, not in the Agent Skills spec (used for slash commands)",
        "'model' is a Claude Code key that AgentWolf ignores",
        "'hooks' is a Claude Code key that AgentWolf ignores",
        "unknown frontmatter key 'colour' ignored",
    )


@pytest.mark.parametrize(
    ("value", "tools"),
    [
        ("Read Grep", ("Read", "Grep")),
        ("Read,Grep, mcp__git__*", ("Read", "Grep", "mcp__git__*")),
        ("[Read, 'Bash(git status:*)']", ("Read", "Bash(git status:*)")),
        ("''", ()),
    ],
)
def test_allowed_tools(value: str, tools: tuple[str, ...]) -> None:
    parsed = parse(skill_md(f"name: review\ndescription: x\nallowed-tools: {value}"))
    assert parsed.entry.allowed_tools == tools


def test_minimal_skill_has_no_limits_or_warnings() -> None:
    parsed = parse(skill_md("name: review\ndescription: x"), folder=None)
    assert parsed.entry.allowed_tools is None
    assert parsed.entry.mcp_servers == ()
    assert parsed.warnings == ()
    assert parsed.user_invocable is True


# --- LocalSkillRoot: scanning --------------------------------------------------------------------


def test_root_implements_the_protocols(tmp_path: Path) -> None:
    root = LocalSkillRoot(tmp_path)
    assert isinstance(root, SkillResource) and isinstance(root, CommandResource)
    assert root.origin == f"local:{tmp_path}"


async def test_root_lists_skills_lazily_and_refreshes(tmp_path: Path) -> None:
    write_skill(tmp_path, "review")
    write_skill(tmp_path, "team/deploy", files={"scripts/run.sh": "echo hi\n", "notes.md": "n"})
    write_skill(tmp_path, "review/nested-inside")  # a skill's subfolders are its files, not skills
    root = LocalSkillRoot(tmp_path)
    entries = await root.list_skills()
    assert [(e.name, e.uri) for e in entries] == [
        ("review", "skill://review/SKILL.md"),
        ("deploy", "skill://team/deploy/SKILL.md"),
    ]
    assert root.files("deploy") == ["notes.md", "scripts/run.sh"]
    assert root.files("review") == ["nested-inside/SKILL.md"]
    assert root.problems == []

    write_skill(tmp_path, "late")
    assert len(await root.list_skills()) == 2
    root.refresh()
    assert {e.name for e in await root.list_skills()} == {"review", "deploy", "late"}


async def test_the_first_scan_leaves_the_event_loop_running(tmp_path: Path) -> None:
    """2,000 skills take about half a second to scan here: the scan runs off the event loop's
    thread (so the loop ticks on meanwhile, however loaded the machine), and concurrent first
    callers share one scan."""
    for i in range(2000):
        write_skill(tmp_path, f"s{i}")
    root = LocalSkillRoot(tmp_path)
    scanned_on: list[int] = []
    scan = root.refresh

    def counted() -> None:
        scanned_on.append(threading.get_ident())
        scan()

    root.refresh = counted  # type: ignore[method-assign]
    listed = await asyncio.gather(*(root.list_skills() for _ in range(5)))
    assert [len(entries) for entries in listed] == [2000] * 5
    assert len(scanned_on) == 1 and scanned_on[0] != threading.get_ident()


async def test_missing_root_is_empty_until_it_appears(tmp_path: Path) -> None:
    root = LocalSkillRoot(tmp_path / "not-yet")
    assert await root.list_skills() == []
    assert root.problems == []
    write_skill(tmp_path / "not-yet", "review")
    root.refresh()
    assert [e.name for e in await root.list_skills()] == ["review"]


def _oversized_md(root: Path) -> None:
    write_skill(root, "bad", body="x" * MAX_SKILL_MD_BYTES)


def _too_many_files(root: Path) -> None:
    write_skill(root, "bad", files={f"ref/{i:03}.md": "r" for i in range(MAX_FILES_PER_SKILL)})


def _too_many_bytes(root: Path) -> None:
    folder = write_skill(root, "bad")
    for i in range(3):
        sparse(folder / f"data{i}.bin", 6 * MIB)


def _folder_symlink_outside(root: Path) -> None:
    outside = write_skill(root.parent / "elsewhere", "bad")
    (root / "bad").symlink_to(outside, target_is_directory=True)


def _skill_md_symlink_outside(root: Path) -> None:
    (root / "bad").mkdir()
    (root.parent / "secret.md").write_text(skill_md("name: bad\ndescription: stolen"))
    (root / "bad" / "SKILL.md").symlink_to(root.parent / "secret.md")


def _not_utf8(root: Path) -> None:
    (root / "bad").mkdir()
    (root / "bad" / "SKILL.md").write_bytes(b"---\nname: bad\ndescription: \xff\xfe\n---\n")


def _wrong_name(root: Path) -> None:
    write_skill(root, "bad", front="name: other\ndescription: x")


def _alias_bomb(root: Path) -> None:
    (root / "bad").mkdir()
    (root / "bad" / "SKILL.md").write_text(BILLION_LAUGHS.replace("name: review", "name: bad"))


def _duplicate_nested_name(root: Path) -> None:
    write_skill(root, "a/bad")
    write_skill(root, "b/bad")


@pytest.mark.parametrize(
    ("make", "problem", "kept"),
    [
        (_oversized_md, "skipped bad: SKILL.md is over the 262144-byte limit", []),
        (_too_many_files, "skipped bad: more than 512 files", []),
        (_too_many_bytes, "skipped bad: more than 16777216 bytes of files", []),
        (_folder_symlink_outside, "skipped bad: it is a symlink to", []),
        (_skill_md_symlink_outside, "skipped bad: path 'bad/SKILL.md' leads outside", []),
        (_not_utf8, "skipped bad: SKILL.md is not valid UTF-8", []),
        (_wrong_name, "skipped bad: skill://bad/SKILL.md: name 'other' does not match its folder 'bad'", []),
        (_alias_bomb, "skipped bad: skill://bad/SKILL.md: YAML anchors and aliases are not allowed", []),
        (_duplicate_nested_name, "skipped b/bad: the name 'bad' is taken by a/bad", ["bad"]),
    ],
)
async def test_bad_skills_are_skipped_with_a_problem(
    tmp_path: Path, make: Callable[[Path], None], problem: str, kept: list[str]
) -> None:
    root_dir = tmp_path / "root"
    root_dir.mkdir()
    write_skill(root_dir, "good")
    make(root_dir)
    root = LocalSkillRoot(root_dir, label="team-skills")
    names = [e.name for e in await root.list_skills()]
    assert names == sorted(["good", *kept])
    assert len(root.problems) == 1
    assert root.problems[0].startswith("team-skills: ")
    assert problem in root.problems[0]


async def test_limits_are_inclusive(tmp_path: Path) -> None:
    """Exactly 512 files (SKILL.md included) and a 256 KiB SKILL.md are fine."""
    write_skill(tmp_path, "many", files={f"ref/{i:03}.md": "r" for i in range(MAX_FILES_PER_SKILL - 1)})
    (tmp_path / "big").mkdir()
    head = skill_md("name: big\ndescription: x", body="")
    (tmp_path / "big" / "SKILL.md").write_text(head + "x" * (MAX_SKILL_MD_BYTES - len(head)))
    root = LocalSkillRoot(tmp_path)
    assert [e.name for e in await root.list_skills()] == ["big", "many"]
    assert len(root.files("many")) == MAX_FILES_PER_SKILL - 1
    assert root.problems == []


async def test_root_level_skill_md_is_reported(tmp_path: Path) -> None:
    (tmp_path / "SKILL.md").write_text(skill_md("name: x\ndescription: x"))
    root = LocalSkillRoot(tmp_path, label="r")
    assert await root.list_skills() == []
    assert root.problems == ["r: SKILL.md at the root is ignored: each skill needs its own folder"]


async def test_symlink_loops_and_inside_links_do_not_break_scanning(tmp_path: Path) -> None:
    folder = write_skill(tmp_path, "review", files={"docs/a.md": "A"})
    (folder / "loop").symlink_to(folder / "loop")
    (folder / "docs" / "up").symlink_to(folder, target_is_directory=True)
    (folder / "alias.md").symlink_to(folder / "docs" / "a.md")
    (tmp_path / "again").symlink_to(folder, target_is_directory=True)
    root = LocalSkillRoot(tmp_path)
    assert [e.name for e in await root.list_skills()] == ["review"]
    assert (await root.read_skill("skill://review/alias.md")).text == "A"
    assert (await root.read_skill("skill://review/docs/up/docs/a.md")).text == "A"
    assert "loop" not in root.files("review")
    assert root.problems == []


# --- LocalSkillRoot: reading ---------------------------------------------------------------------


@pytest.fixture
def review_root(tmp_path: Path) -> LocalSkillRoot:
    root_dir = tmp_path / "root"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("TOP SECRET")
    folder = write_skill(
        root_dir,
        "review",
        body="Review $ARGUMENTS: first $1, second $2.\n",
        files={
            "notes.md": "# Notes\n",
            "logo.png": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR",
            "nul.txt": "text with a \x00 byte",
            "latin1.md": "caf\xe9".encode("latin-1"),
            "%2e%2e": "a file literally named %2e%2e",
            "docs/guide.md": "guide",
        },
    )
    write_skill(root_dir, "other")
    (folder / "leak.txt").symlink_to(outside / "secret.txt")
    (folder / "leakdir").symlink_to(outside, target_is_directory=True)
    sparse(folder / "huge.log", MAX_FILE_BYTES + 1)
    return LocalSkillRoot(root_dir)


async def test_read_skill_md_returns_body_without_frontmatter(review_root: LocalSkillRoot) -> None:
    for uri in ("skill://review/SKILL.md", "skill://review"):
        assert await review_root.read_skill(uri) == SkillFile(
            uri=uri, text="Review $ARGUMENTS: first $1, second $2.\n"
        )


async def test_read_reference_files(review_root: LocalSkillRoot) -> None:
    notes = await review_root.read_skill("skill://review/notes.md")
    assert (notes.text, notes.blob, notes.mime_type) == ("# Notes\n", None, "text/markdown")
    assert (await review_root.read_skill("skill://review/docs/guide.md")).text == "guide"
    literal = await review_root.read_skill("skill://review/%252e%252e")
    assert literal.text == "a file literally named %2e%2e"


@pytest.mark.parametrize(
    ("file", "mime_type"),
    [("logo.png", "image/png"), ("nul.txt", "text/plain"), ("latin1.md", "text/markdown")],
)
async def test_binary_files_come_back_as_blobs(
    review_root: LocalSkillRoot, file: str, mime_type: str
) -> None:
    read = await review_root.read_skill(f"skill://review/{file}")
    assert read.text is None
    assert read.blob == (review_root.path / "review" / file).read_bytes()
    assert read.mime_type == mime_type


@pytest.mark.parametrize(
    ("uri", "problem"),
    [
        ("skill://review/leak.txt", "leads outside the skill"),
        ("skill://review/leakdir/secret.txt", "leads outside the skill"),
        ("skill://review/../other/SKILL.md", "'..'"),
        ("skill://review/%2e%2e/other/SKILL.md", "'..'"),
        ("skill://review/..%2f..%2foutside%2fsecret.txt", "'..'"),
        ("skill://review/%252e%252e%252f%252e%252e%252foutside%252fsecret.txt", "no such file"),
        ("skill://review/docs", "no such file"),
        ("skill://review/missing.md", "no such file"),
        ("skill://nobody/SKILL.md", "no skill in"),
        ("http://review/SKILL.md", "unsupported URI"),
        ("file:///etc/passwd", "unsupported URI"),
        ("mcp://review/notes.md", "unsupported URI"),
        ("skill:/review/SKILL.md", "unsupported URI"),
        ("SKILL://review/SKILL.md", "unsupported URI"),
    ],
)
async def test_hostile_reads_are_refused(review_root: LocalSkillRoot, uri: str, problem: str) -> None:
    with pytest.raises(ExtensionError, match=problem):
        await review_root.read_skill(uri)
    assert await review_root.skill_exists(uri) is False


async def test_oversized_reference_file_is_refused(review_root: LocalSkillRoot) -> None:
    with pytest.raises(ExtensionError, match="larger than the 4194304-byte limit"):
        await review_root.read_skill("skill://review/huge.log")


async def test_skill_exists(review_root: LocalSkillRoot) -> None:
    assert await review_root.skill_exists("skill://review/SKILL.md")
    assert await review_root.skill_exists("skill://review/huge.log")  # cheap: exists, without reading
    assert await review_root.skill_exists("skill://review/docs/guide.md")
    assert not await review_root.skill_exists("skill://review/nope.md")


async def test_escaping_file_symlink_is_not_listed(review_root: LocalSkillRoot) -> None:
    files = review_root.files("review")
    assert "leak.txt" not in files and "notes.md" in files
    assert any("review/leak.txt: not served" in warning for warning in review_root.warnings)
    with pytest.raises(ExtensionError, match="no skill named 'ghost'"):
        review_root.files("ghost")


# --- commands ------------------------------------------------------------------------------------


async def test_commands_expand_arguments(review_root: LocalSkillRoot) -> None:
    commands = await review_root.list_commands()
    assert [(c.name, c.origin) for c in commands] == [
        ("other", review_root.origin),
        ("review", review_root.origin),
    ]
    text = await review_root.get_command("review", {"ARGUMENTS": 'src/app.py "two words"'})
    assert text == 'Review src/app.py "two words": first src/app.py, second two words.\n'
    assert await review_root.get_command("review", {}) == "Review : first , second .\n"


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ("$1 $2 $ARGUMENTS", "Review $1 $2 $ARGUMENTS: first $1, second $2.\n"),
        ('unbalanced "quote', 'Review unbalanced "quote: first unbalanced, second "quote.\n'),
    ],
)
async def test_argument_text_is_never_expanded_again(
    review_root: LocalSkillRoot, arguments: str, expected: str
) -> None:
    assert await review_root.get_command("review", {"ARGUMENTS": arguments}) == expected


async def test_command_without_placeholder_gets_arguments_appended(tmp_path: Path) -> None:
    write_skill(tmp_path, "plain", body="Do it.\n")
    root = LocalSkillRoot(tmp_path)
    assert await root.get_command("plain", {"ARGUMENTS": "now"}) == "Do it.\n\nARGUMENTS: now\n"
    assert await root.get_command("plain", {}) == "Do it.\n"
    write_skill(tmp_path, "positional", body="Fix $1.\n")
    root.refresh()
    assert await root.get_command("positional", {"ARGUMENTS": "bug-1 extra"}) == "Fix bug-1.\n"


async def test_non_invocable_and_unknown_commands(tmp_path: Path) -> None:
    write_skill(
        tmp_path, "hidden", front="name: hidden\ndescription: x\nuser-invocable: false\nargument-hint: x"
    )
    write_skill(tmp_path, "shown", front="name: shown\ndescription: x\nargument-hint: '[file]'")
    root = LocalSkillRoot(tmp_path)
    commands = await root.list_commands()
    assert [c.name for c in commands] == ["shown"]
    assert commands[0].arguments[0].name == "ARGUMENTS"
    assert commands[0].arguments[0].description == "[file]"
    with pytest.raises(ExtensionError, match="not user-invocable"):
        await root.get_command("hidden", {})
    with pytest.raises(ExtensionError, match="no skill named 'ghost'"):
        await root.get_command("ghost", {})


# --- SkillManagerCap -----------------------------------------------------------------------------


async def test_manager_merges_in_order_and_reports_shadowing(tmp_path: Path) -> None:
    write_skill(tmp_path / "first", "review", body="first review\n")
    write_skill(tmp_path / "second", "review", body="second review\n")
    write_skill(tmp_path / "second", "team/lint", body="lint\n")
    write_skill(tmp_path / "second", "x/review", body="nested second review\n")
    first, second = LocalSkillRoot(tmp_path / "first"), LocalSkillRoot(tmp_path / "second")
    manager = SkillManagerCap([first, second])
    assert isinstance(manager, SkillResource)

    entries = await manager.list_skills()
    assert [(e.name, e.origin) for e in entries] == [("review", first.origin), ("lint", second.origin)]
    assert manager.shadowed == [
        f"skill 'review' (skill://review/SKILL.md) from {second.origin} is shadowed by the one from "
        f"{first.origin}"
    ]
    assert second.problems == [
        f"{tmp_path / 'second'}: skipped x/review: the name 'review' is taken by review"
    ]
    assert (await manager.read_skill("skill://review/SKILL.md")).text == "first review\n"
    assert (await manager.read_skill("skill://team/lint/SKILL.md")).text == "lint\n"
    assert await manager.skill_exists("skill://team/lint")
    assert not await manager.skill_exists("skill://x/review/SKILL.md")
    assert not await manager.skill_exists("mcp://x/y")
    with pytest.raises(ExtensionError, match="unsupported URI"):
        await manager.read_skill("mcp://server/thing")
    with pytest.raises(ExtensionError, match="no skill for"):
        await manager.read_skill("skill://x/review/SKILL.md")


async def test_manager_sees_new_skills_and_survives_a_failing_source(tmp_path: Path) -> None:
    class Down:
        async def list_skills(self) -> list[SkillEntry]:
            raise ConnectionError("server gone")

        async def read_skill(self, uri: str) -> SkillFile:
            raise AssertionError

        async def skill_exists(self, uri: str) -> bool:
            raise AssertionError

        def __repr__(self) -> str:
            return "mcp:down"

    local = LocalSkillRoot(tmp_path)
    manager = SkillManagerCap([Down(), local])
    assert await manager.list_skills() == []
    assert manager.problems == ["mcp:down: listing skills failed: server gone"]
    write_skill(tmp_path, "fresh", body="new\n")
    local.refresh()
    assert (await manager.read_skill("skill://fresh/SKILL.md")).text == "new\n"


async def test_catalog(tmp_path: Path) -> None:
    assert await SkillManagerCap([LocalSkillRoot(tmp_path)]).catalog() == ""
    write_skill(
        tmp_path, "review", front='name: review\ndescription: "Checks <diffs> & \\"quotes\\"\\n  twice"'
    )
    write_skill(tmp_path, "deploy")
    catalog = await SkillManagerCap([LocalSkillRoot(tmp_path)]).catalog()
    assert catalog == (
        "<available-skills>\n"
        '<skill name="deploy" uri="skill://deploy/SKILL.md">The deploy skill.</skill>\n'
        '<skill name="review" uri="skill://review/SKILL.md">Checks &lt;diffs&gt; &amp; "quotes" '
        "twice</skill>\n"
        "</available-skills>"
    )


async def test_catalog_truncation_respects_the_budget(tmp_path: Path) -> None:
    for i in range(40):
        write_skill(tmp_path, f"skill-{i:02}", front=f"name: skill-{i:02}\ndescription: {'é' * 300}")
    manager = SkillManagerCap([LocalSkillRoot(tmp_path)])
    full = await manager.catalog(budget_bytes=1_000_000)
    assert full.count("<skill ") == 40
    for budget in (0, 10, 60, 700, 1_500, 5_000, 20_000, len(full.encode()) - 1):
        catalog = await manager.catalog(budget_bytes=budget)
        assert len(catalog.encode()) <= budget
        if catalog:
            shown = catalog.count("<skill ")
            assert f"({40 - shown} more skills not shown)\n</available-skills>" in catalog
    assert await manager.catalog(budget_bytes=10) == ""
    assert (await manager.catalog(budget_bytes=len(full.encode()) - 1)).count("<skill ") == 39
    assert await manager.catalog(budget_bytes=len(full.encode())) == full


async def test_a_skill_nested_in_another_origins_skill_is_shadowed(tmp_path: Path) -> None:
    """A later source listing `team/review` must not capture reads of the `team` skill's files."""
    first, second = tmp_path / "first", tmp_path / "second"
    for root, rel in ((first, "team"), (second, "team/review")):
        folder = root / rel
        folder.mkdir(parents=True)
        name = rel.rsplit("/", 1)[-1]
        (folder / "SKILL.md").write_text(f"---\nname: {name}\ndescription: d\n---\n{root.name}\n")
    (first / "team" / "review").mkdir(exist_ok=True)
    (first / "team" / "review" / "checklist.md").write_text("from first\n")
    (second / "team" / "review" / "checklist.md").write_text("INJECTED\n")
    manager = SkillManagerCap([LocalSkillRoot(first), LocalSkillRoot(second)])
    assert [s.name for s in await manager.list_skills()] == ["team"]
    assert any("review" in s and "shadowed" in s for s in manager.shadowed)
    read = await manager.read_skill("skill://team/review/checklist.md")
    assert read.text == "from first\n"
