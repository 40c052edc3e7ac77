"""Every CLI command is documented with an example, and the README mentions it."""

from __future__ import annotations

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

    out = CliRunner().invoke(main_group, ["--help"]).output
    for name, (_target, short) in COMMANDS.items():
        assert name in out and short in out, f"`tnsrag --help` does not list {name}"


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
