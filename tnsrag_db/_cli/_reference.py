"""The command-line reference, ``docs/cli.md``, generated from the click command tree.

``python -m tnsrag_db._cli._reference [PATH]`` writes it (default ``docs/cli.md`` under the
current directory); ``tests/unit/test_cli_reference.py`` fails when the checked-in file
differs from what :func:`render` gives, so the reference cannot drift from the commands.
Every command is listed with its usage, its help text, its arguments and its options
(names, value type, default, environment variable, help). Importing this module loads
every command's module, which ``tnsrag --help`` itself never does.
"""

from __future__ import annotations

import enum
import inspect
import sys
from collections.abc import Iterator
from pathlib import Path

import click

from tnsrag_db._cli import main_group

__all__ = ["main", "render"]

#: Columns the usage lines are laid out in, whatever the terminal's width.
_WIDTH = 120

_HEADER = """# CLI reference

Generated from the `tnsrag` commands by `python -m tnsrag_db._cli._reference`; do not edit
by hand (`tests/unit/test_cli_reference.py` fails when this file differs from what the
commands generate). Guides with examples: [Ingest and the CLI](ingest-and-cli.md).
"""


def _walk(ctx: click.Context) -> Iterator[click.Context]:
    """``ctx`` and the context of every subcommand below it, depth first in name order."""
    yield ctx
    command = ctx.command
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is None or sub.hidden:
                continue
            yield from _walk(click.Context(sub, info_name=name, parent=ctx))


def _cell(text: str) -> str:
    """``text`` fit for one Markdown table cell: one line, pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def _help(command: click.Command) -> str:
    """The command's help as Markdown paragraphs (click's ``\\b`` no-rewrap markers dropped)."""
    text = inspect.cleandoc(command.help or "")
    return "\n".join(line for line in text.splitlines() if line.strip() != "\b").strip()


def _default(param: click.Parameter, ctx: click.Context) -> str:
    """The default as the user would type it, or "" when there is none to show."""
    default = param.get_default(ctx, call=False)
    if callable(default):
        return "computed at run time"
    # Recent click marks "no default given" with an enum sentinel named UNSET (not exported).
    if isinstance(default, enum.Enum) and default.name == "UNSET":
        return ""
    if default is None or default is False or default == () or default == []:
        return ""
    if isinstance(param, click.Option) and param.is_flag:
        return "on" if default is True else ""
    if isinstance(default, (list, tuple)):
        return ", ".join(f"`{v}`" for v in default)
    return f"`{default}`"


def _value(param: click.Parameter, ctx: click.Context) -> str:
    """What the option takes: its metavar or type name, "flag" for a flag."""
    if isinstance(param, click.Option) and param.is_flag:
        return "flag"
    if isinstance(param.type, click.Choice):
        return " \\| ".join(f"`{c}`" for c in param.type.choices)
    metavar = param.make_metavar(ctx) if hasattr(param, "make_metavar") else param.type.name.upper()
    return f"`{metavar}`"


def _option_row(param: click.Option, ctx: click.Context) -> str:
    names = ", ".join(f"`{n}`" for n in (*param.opts, *param.secondary_opts))
    if param.multiple:
        names += " (repeatable)"
    env = param.envvar if isinstance(param.envvar, str) else ", ".join(param.envvar or ())
    help_text = param.help or ""
    if env:
        help_text = f"{help_text} Environment: `{env}`.".strip()
    return f"| {names} | {_value(param, ctx)} | {_default(param, ctx)} | {_cell(help_text)} |"


def _section(ctx: click.Context) -> str:
    command = ctx.command
    lines = [f"## {ctx.command_path}", "", "```text", command.get_usage(ctx), "```", ""]
    help_text = _help(command)
    if help_text:
        lines += [help_text, ""]
    arguments = [p for p in command.params if isinstance(p, click.Argument)]
    if arguments:
        lines += ["Arguments: " + ", ".join(
            f"`{a.make_metavar(ctx) if hasattr(a, 'make_metavar') else a.name}`"
            + (" (optional)" if not a.required else "") for a in arguments), ""]
    options = [p for p in command.params if isinstance(p, click.Option) and not p.hidden]
    if options:
        lines += ["| option | value | default | meaning |", "| --- | --- | --- | --- |"]
        lines += [_option_row(o, ctx) for o in options]
        lines.append("")
    if isinstance(command, click.Group):
        subs = [n for n in command.list_commands(ctx) if (c := command.get_command(ctx, n)) and not c.hidden]
        lines += ["Commands: " + ", ".join(f"[`{n}`](#{_anchor(f'{ctx.command_path} {n}')})" for n in subs), ""]
    return "\n".join(lines)


def _anchor(title: str) -> str:
    """The anchor GitHub gives a heading: lower case, spaces to hyphens, punctuation dropped."""
    return "".join(ch for ch in title.lower().replace(" ", "-") if ch.isalnum() or ch in "-_")


def render() -> str:
    """The whole reference as Markdown, from the live command tree."""
    # A fixed width: usage lines must not wrap with the terminal the generator runs in.
    root = click.Context(main_group, info_name="tnsrag", terminal_width=_WIDTH, max_content_width=_WIDTH)
    sections = [_section(ctx) for ctx in _walk(root)]
    return _HEADER + "\n" + "\n".join(sections).rstrip() + "\n"


def main(argv: list[str] | None = None) -> None:
    """Write the reference to ``argv[0]`` (default ``docs/cli.md``)."""
    args = sys.argv[1:] if argv is None else argv
    path = Path(args[0] if args else "docs/cli.md")
    path.write_text(render(), encoding="utf-8")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
