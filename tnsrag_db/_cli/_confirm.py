"""Confirmation before a command destroys data (``drop``, ``db downgrade``)."""

from __future__ import annotations

import sys

import click

__all__ = ["confirm_destruction", "stdin_is_tty", "yes_option"]

yes_option = click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation (needed without a terminal).")


def stdin_is_tty() -> bool:
    """Whether standard input is a terminal someone can answer a question on."""
    try:
        return sys.stdin.isatty()
    except (AttributeError, ValueError):  # closed or replaced stdin
        return False


def confirm_destruction(what: str, *, yes: bool) -> None:
    """Ask "``what``? [y/N]" on the terminal unless ``yes``.

    Without a terminal on stdin and without ``--yes`` the command refuses: exit status
    1 with a message naming ``--yes``, so a script never destroys data by accident.
    A "no" aborts with exit status 1 too.
    """
    if yes:
        return
    if not stdin_is_tty():
        click.echo(f"error: refusing to {what} without --yes (stdin is not a terminal to confirm on)", err=True)
        sys.exit(1)
    if not click.confirm(f"{what[0].upper()}{what[1:]}?", default=False, err=True):
        click.echo("aborted: nothing was changed", err=True)
        sys.exit(1)
