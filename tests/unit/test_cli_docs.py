"""Every CLI command is documented with an example, and the README mentions it."""

from __future__ import annotations

from pathlib import Path

import click

from tnsrag_db.cli import main_group

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def _commands(group: click.Group, prefix: str = "") -> list[tuple[str, click.Command]]:
    out: list[tuple[str, click.Command]] = []
    for name, cmd in sorted(group.commands.items()):
        full = f"{prefix}{name}"
        out.append((full, cmd))
        if isinstance(cmd, click.Group):
            out.extend(_commands(cmd, full + " "))
    return out


def test_every_command_has_an_example_and_readme_mention() -> None:
    commands = _commands(main_group)
    assert {"db upgrade", "db downgrade", "db current", "db check", "db sql", "ingest", "query"} <= {
        n for n, _ in commands}
    for name, cmd in commands:
        assert cmd.help and "Example:" in cmd.help, f"`tnsrag {name}` has no Example in its help"
        assert f"tnsrag {name.split()[0]}" in README, f"README does not mention `tnsrag {name}`"
