"""Every CLI command is documented with an example, and the README mentions it."""

from __future__ import annotations

import re
from pathlib import Path

import click

from tnsrag_db._cli import main_group

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def _commands(group: click.Group, prefix: str = "") -> list[tuple[str, click.Command]]:
    # list_commands/get_command, not group.commands: the root group loads its commands lazily.
    ctx = click.Context(group)
    out: list[tuple[str, click.Command]] = []
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        assert cmd is not None, f"`tnsrag {prefix}{name}` is listed but does not load"
        full = f"{prefix}{name}"
        out.append((full, cmd))
        if isinstance(cmd, click.Group):
            out.extend(_commands(cmd, full + " "))
    return out


def test_every_command_has_an_example_and_readme_mention() -> None:
    commands = _commands(main_group)
    assert {"db upgrade", "db downgrade", "db current", "db check", "db sql", "ingest", "query",
            "server start", "server stop", "server status"} <= {n for n, _ in commands}
    for name, cmd in commands:
        assert cmd.help and "Example:" in cmd.help, f"`tnsrag {name}` has no Example in its help"
        assert f"tnsrag {name.split()[0]}" in README, f"README does not mention `tnsrag {name}`"


def test_root_help_lists_every_command_with_its_registered_help() -> None:
    from click.testing import CliRunner

    from tnsrag_db._cli import COMMANDS
    from tnsrag_db._cli.db import DB_COMMANDS

    for args, registered in ((["--help"], COMMANDS), (["db", "--help"], DB_COMMANDS)):
        out = " ".join(CliRunner().invoke(main_group, args).output.split())  # the help rewrapped as one line
        for name, (_target, short) in registered.items():
            assert f" {name} {short}" in out, f"`tnsrag {' '.join(args)}` does not list {name} with its help"


def test_version_and_help_import_no_database_stack() -> None:
    import subprocess
    import sys

    code = ("import sys; from tnsrag_db._cli import main_group\n"
            "for args in (['--version'], ['--help']):\n"
            "    try: main_group(args, prog_name='tnsrag')\n"
            "    except SystemExit as exc: assert exc.code == 0, exc\n"
            "heavy = sorted(m for m in ('sqlalchemy', 'alembic', 'psycopg', 'numpy', 'tqdm') if m in sys.modules)\n"
            "print('heavy=' + ','.join(heavy))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.splitlines()[-1] == "heavy=", run.stdout


def test_db_commands_other_than_the_migrations_import_no_alembic() -> None:
    """``tnsrag db`` loads each command's module when it runs: the upkeep and tenant
    commands do not import alembic, which the migration commands' module does."""
    import subprocess
    import sys

    code = ("import sys; from tnsrag_db._cli import main_group\n"
            "for args in (['db', '--help'], ['db', 'sweep', '--help'], ['db', 'tenant', 'list', '--help']):\n"
            "    try: main_group(args, prog_name='tnsrag')\n"
            "    except SystemExit as exc: assert exc.code == 0, exc\n"
            "print(f'alembic={\"alembic\" in sys.modules}')\n"
            "main_group(['db', 'current', '--help'], prog_name='tnsrag', standalone_mode=False)\n"
            "print(f'alembic={\"alembic\" in sys.modules}')")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert [line for line in run.stdout.splitlines() if line.startswith("alembic=")] == \
        ["alembic=False", "alembic=True"], run.stdout


# -- "see ..." references name sections that exist --------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
_FENCE = re.compile(r"^[ \t]{0,3}(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t]*#*[ \t]*$")
#: A file named with a quoted section: ``README, "Tenancy"``, ``docs/deployment.md 'Tenancy'``.
_FILE_SECTION = re.compile(r"\b(README(?:\.md)?|(?:docs/)?[\w-]+\.md),? [\"'“]([^\"'”]+)[\"'”]")
#: A Markdown link to a file of the repository or a section: ``[Tenancy](deployment.md#tenancy)``.
_LINK = re.compile(r"\]\(((?:[\w./-]+\.md)?)(?:#([\w-]+))?\)")
#: "see" and what follows it, whitespace collapsed.
_SEE = re.compile(r"\bsee (?:the )?(.{0,120})", re.IGNORECASE)


def _doc(name: str, relative_to: Path = ROOT) -> Path:
    """The file a reference names: ``README``, ``docs/x.md`` or ``x.md`` (beside ``relative_to``)."""
    if name in ("README", "README.md"):
        return ROOT / "README.md"
    for base in (relative_to, ROOT, ROOT / "docs"):
        if (base / name).is_file():
            return (base / name).resolve()
    raise AssertionError(f"{name} names no file of the repository")


def _headings(path: Path) -> tuple[set[str], set[str]]:
    """The headings of a Markdown file outside code fences, and their GitHub anchors."""
    titles: set[str] = set()
    anchors: set[str] = set()
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        heading = None if fenced else _HEADING.match(line)
        if heading:
            title = heading.group(2).strip()
            titles.add(title)
            anchor = re.sub(r"[^\w\- ]", "", re.sub(r"`", "", title).lower()).replace(" ", "-")
            n, unique = 0, anchor
            while unique in anchors:
                n += 1
                unique = f"{anchor}-{n}"
            anchors.add(unique)
    return titles, anchors


def _command_exists(words: list[str]) -> bool:
    """Whether ``tnsrag WORDS...`` names a command (and each ``--option`` after it one of its options)."""
    command: click.Command = main_group
    ctx = click.Context(main_group)
    options: list[str] = []
    for word in words:
        if word.startswith("-"):
            options.append(word.split("=")[0])
        elif isinstance(command, click.Group) and not options:
            found = command.get_command(ctx, word)
            if found is None:
                return False
            command = found
    known = {opt for p in command.params for opt in (*p.opts, *p.secondary_opts)}
    return command is not main_group and all(o in known for o in options)


def _problems(text: str, where: str, relative_to: Path = ROOT) -> list[str]:
    """What is wrong with the references of ``text``: a section that a file does not have,
    a link to no file or anchor, a "see README" naming no section, a "see `tnsrag X`"
    naming no command or option."""
    flat = re.sub(r"\s+", " ", text)
    problems: list[str] = []
    for name, title in _FILE_SECTION.findall(flat):
        path = _doc(name, relative_to)
        if title not in _headings(path)[0]:
            problems.append(f'{where}: {name}, "{title}": {path.relative_to(ROOT)} has no such heading')
    for target, anchor in _LINK.findall(flat):
        if not target and not anchor:
            continue
        try:
            path = _doc(target, relative_to) if target else (ROOT / where)
        except AssertionError as exc:
            problems.append(f"{where}: {exc}")
            continue
        if anchor and anchor not in _headings(path)[1]:
            problems.append(f"{where}: link to {target}#{anchor}: {path.relative_to(ROOT)} has no such heading")
    for after in _SEE.findall(flat):
        if re.match(r"(README|docs/|[\w-]+\.md\b)", after) and not _FILE_SECTION.match(after):
            problems.append(f"{where}: 'see {after[:60]}' names a file but no section (FILE, \"Heading\")")
        elif re.match(r'["“]', after):
            title = re.match(r'["“]([^"”]+)["”]', after)
            if where.endswith(".md") and (title is None or title.group(1) not in _headings(ROOT / where)[0]):
                problems.append(f"{where}: 'see {after[:60]}': no such heading in {where}")
        elif after.startswith("`tnsrag "):
            words = after[len("`tnsrag "):].split("`", 1)[0].split()
            if not _command_exists(words):
                problems.append(f"{where}: 'see `tnsrag {' '.join(words)}`' names no command or option")
    return problems


def _help_texts() -> list[tuple[str, str]]:
    texts = [("tnsrag --help", main_group.help or "")]
    for name, cmd in _commands(main_group):
        texts.append((f"tnsrag {name} --help", cmd.help or ""))
        texts += [(f"tnsrag {name} {p.opts[0]}", p.help or "") for p in cmd.params if isinstance(p, click.Option)]
    return texts


def test_every_see_reference_in_the_docs_and_the_cli_names_a_section_that_exists() -> None:
    problems: list[str] = []
    for path in DOCS:
        problems += _problems(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)), path.parent)
    for where, text in _help_texts():
        problems += _problems(text, where)
    # Messages and docstrings of the package name sections the same way.
    for path in sorted((ROOT / "tnsrag_db").rglob("*.py")):
        problems += _problems(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    assert not problems, "\n".join(problems)


def test_the_reference_check_finds_what_moved() -> None:
    # The checker itself: a section that moved, a link to a missing anchor, a file without a
    # section, a command that does not exist; and the forms that do resolve.
    assert len(_problems('see README, "Tenancy"', "x")) == 1
    assert _problems('see docs/deployment.md, "Tenancy"', "x") == []
    assert _problems("see [Tenancy](deployment.md#tenancy)", "x", ROOT / "docs") == []
    assert len(_problems("see [Tenancy](deployment.md#tenants)", "x", ROOT / "docs")) == 1
    assert len(_problems("see README for the rest", "x")) == 1
    assert len(_problems("see `tnsrag db stats`", "x")) == 1 and _problems("see `tnsrag stats`", "x") == []
    assert len(_problems("see `tnsrag query --no-such-option`", "x")) == 1
    assert _problems("see `tnsrag query --embedding`", "x") == []
    assert _problems('see "Tenancy"', "docs/performance.md") == []
    assert len(_problems('see "Tenants"', "docs/performance.md")) == 1


def test_every_tnsrag_command_the_docs_name_in_code_exists() -> None:
    # `tnsrag db stats` in docs/strategies.md named a command that never existed.
    problems = []
    for path in DOCS:
        flat = re.sub(r"\s+", " ", path.read_text(encoding="utf-8"))
        for words in re.findall(r"`tnsrag ([^`]+)`", flat):
            first = [w for w in words.split() if not w.startswith("-")][:2]
            if not first or any(w.isupper() or w.endswith(":") for w in first):
                continue  # a placeholder (`tnsrag COMMAND --help`) or a line of output (`tnsrag mcp: ...`)
            if not _command_exists(first):
                problems.append(f"{path.relative_to(ROOT)}: `tnsrag {words}`")
    assert not problems, "\n".join(problems)
