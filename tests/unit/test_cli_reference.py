"""docs/cli.md is what the click commands generate, so the CLI reference cannot drift."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from tnsrag_db._cli import main_group
from tnsrag_db._cli._reference import render

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def test_docs_cli_md_is_what_the_commands_generate() -> None:
    assert REFERENCE.read_text(encoding="utf-8") == render(), (
        "docs/cli.md differs from the commands: run `python -m tnsrag_db._cli._reference` and commit docs/cli.md")


def test_the_reference_names_every_command_and_option_with_its_default() -> None:
    text = render()
    ctx = click.Context(main_group, info_name="tnsrag")
    for name in main_group.list_commands(ctx):
        assert f"\n## tnsrag {name}\n" in text, name
    query = text.split("\n## tnsrag query\n", 1)[1].split("\n## ", 1)[0]
    assert "| `--top-k` | `INTEGER RANGE` | `5` |" in query
    assert "| `--strategy` | `vector` \\| `keyword` \\| `hybrid`" in query and "| `hybrid` |" in query
    assert "UNSET" not in text and "Sentinel" not in text  # an option without a default shows none
    assert "Example:" in query
    db_upgrade = text.split("\n## tnsrag db upgrade\n", 1)[1].split("\n## ", 1)[0]
    assert "`--lock-timeout`" in db_upgrade and "Environment: `TNSRAG_DATABASE_URL`" in db_upgrade


def test_the_reference_does_not_depend_on_the_terminal_width(monkeypatch: pytest.MonkeyPatch) -> None:
    wide = render()
    monkeypatch.setenv("COLUMNS", "30")
    assert render() == wide
