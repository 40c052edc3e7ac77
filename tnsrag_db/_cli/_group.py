"""A click group whose subcommands are imported only when they run, and which turns Ctrl-C
into exit status 130 with one line; groups that suggest the command meant by a mistyped name."""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping
from typing import Any

import click

__all__ = ["COMMAND_ALIASES", "EXIT_INTERRUPTED", "STOPPING", "LazyGroup", "SuggestingGroup", "did_you_mean"]

#: Exit status after Ctrl-C (128 + SIGINT), as shells report it.
EXIT_INTERRUPTED = 130
#: Said at once at the first Ctrl-C of a batch loop (ingest, embed): it stops within a
#: second or two, rolling the batch in progress back; a second Ctrl-C interrupts at once.
STOPPING = "stopping after the current batch; Ctrl-C again to abandon it"


#: Words people type for a command of another name (the suggestion names the command).
COMMAND_ALIASES = {"search": "query", "retrieve": "query", "ask": "query", "find": "query", "list": "corpora",
                   "ls": "corpora", "rm": "delete", "remove": "delete", "load": "ingest", "add": "ingest",
                   "import": "ingest", "restore": "ingest", "dump": "export", "migrate": "upgrade"}


def did_you_mean(word: str, names: Iterable[str], aliases: Mapping[str, str] | None = None) -> str:
    """`` Did you mean 'x'?`` for the names close to ``word`` (difflib, any case), or the name
    an alias of ``aliases`` stands for; "" when none is."""
    from difflib import get_close_matches  # only for a mistyped name: not on the path of --help

    names = list(names)
    lower = {name.lower(): name for name in names}
    close = [lower[m] for m in get_close_matches(word.lower(), list(lower), n=3)]
    alias = (aliases or {}).get(word.lower())
    if alias is not None and alias not in close:
        close.insert(0, alias)
    if not close:
        return ""
    return f" Did you mean {' or '.join(repr(c) for c in close)}?"


class SuggestingGroup(click.Group):
    """A :class:`click.Group` whose error for an unknown command suggests the close names
    (``tnsrag querry``: "Did you mean 'query'?") and the command an alias of
    :data:`COMMAND_ALIASES` stands for, among the commands it has."""

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[str | None, click.Command | None,
                                                                          list[str]]:
        name = click.utils.make_str(args[0])
        if (not ctx.resilient_parsing and not name.startswith("-") and ctx.token_normalize_func is None
                and self.get_command(ctx, name) is None):
            names = self.list_commands(ctx)
            aliases = {word: cmd for word, cmd in COMMAND_ALIASES.items() if cmd in names}
            ctx.fail(f"No such command {name!r}.{did_you_mean(name, names, aliases)}")
        return super().resolve_command(ctx, args)


class LazyGroup(SuggestingGroup):
    """A :class:`click.Group` over ``lazy_commands``: name -> ("module:attribute", short help).

    ``list_commands`` names every command without importing any; ``get_command`` imports
    the one asked for; the group's ``--help`` lists the short helps given here, so it
    imports nothing either.

    Ctrl-C (KeyboardInterrupt) while the arguments are parsed, a command is imported or
    runs prints ``interrupted`` on stderr and exits with :data:`EXIT_INTERRUPTED`, instead of
    click's ``Aborted!`` and exit status 1 (a command that has more to say, like ``ingest``,
    prints its own line and exits 130 itself).
    """

    def __init__(self, *args: Any, lazy_commands: Mapping[str, tuple[str, str]] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_commands: dict[str, tuple[str, str]] = dict(lazy_commands or {})

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except KeyboardInterrupt:
            _interrupted()
            raise  # pragma: no cover - _interrupted raises

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            _interrupted()
            raise  # pragma: no cover - _interrupted raises

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(self.lazy_commands))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is not None or cmd_name not in self.lazy_commands:
            return command
        module_name, _, attribute = self.lazy_commands[cmd_name][0].partition(":")
        command = getattr(importlib.import_module(module_name), attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{module_name}:{attribute} is not a click command")
        self.add_command(command, cmd_name)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows: list[tuple[str, str]] = []
        for name in self.list_commands(ctx):
            if name in self.lazy_commands:  # the registered help, loaded or not: same output either way
                rows.append((name, self.lazy_commands[name][1]))
                continue
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(formatter.width)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def _interrupted() -> None:
    click.echo("interrupted", err=True)
    raise click.exceptions.Exit(EXIT_INTERRUPTED)
