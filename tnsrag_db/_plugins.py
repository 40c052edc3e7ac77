"""Optional parts of an installation: a missing one is "not available", a broken one is a bug.

Strategies, retrieval modes and integrations import modules that an installation may
lack: a third-party package of an extra (``mcp`` for ``[mcp]``) or one of the library's
own strategy modules left out of a slimmed build. :func:`unavailable_unless_installed`
turns the :class:`ImportError` of such a missing module into
:class:`StrategyUnavailableError` (naming the extra to install, when there is one), and
lets every other import error through unchanged: an import that fails *inside* a module
that is there (a renamed function, a typo, a dependency of the dependency) is a bug to
see with its traceback, not a quiet "not installed".

The test is on the :class:`ModuleNotFoundError` and its :attr:`~ImportError.name`, the
module the import system could not find (``import a.b.c`` with ``a`` absent names ``a``);
a message is never parsed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Iterator

from tnsrag_db._errors import StrategyUnavailableError, TnsragError

__all__ = ["is_missing", "unavailable_unless_installed"]


def _packages(module: str) -> Iterator[str]:
    """``a.b.c`` -> ``a.b.c``, ``a.b``, ``a``: an absent package makes each module below it absent."""
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        yield ".".join(parts[:end])


def is_missing(exc: ImportError, modules: Collection[str]) -> bool:
    """True when ``exc`` says one of ``modules`` (or a package holding one) is not installed.

    Only a :class:`ModuleNotFoundError` counts. A module *below* a listed one
    (``mcp.server`` for ``mcp``) does not: the listed module is there and something
    inside it failed; nor does a name missing from a listed module (``from M import X``
    raises an ``ImportError`` whose ``name`` is M).
    """
    if not isinstance(exc, ModuleNotFoundError):
        return False  # "cannot import name X from M": M is there, X is not (a rename, a typo)
    name = exc.name
    return name is not None and any(name in _packages(module) for module in modules)


def reraise_interrupt(exc: BaseException) -> None:
    """Raise :class:`KeyboardInterrupt` when ``exc`` (an import's error) hides one.

    A Ctrl-C while a C extension initialises (numpy's, onnxruntime's) comes back as
    ``ImportError('initialization failed')`` whose context is the KeyboardInterrupt: taken
    for a missing package, it made ``tnsrag ingest`` fall back to the hash embedding and
    go on, the Ctrl-C lost. Every place that turns an ImportError into "not installed"
    calls this first.
    """
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            raise KeyboardInterrupt from exc
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__


def _install_hint(extra: str | None) -> str:
    return f"; install it with: pip install 'tnsrag-db[{extra}]'" if extra else ""


@contextlib.contextmanager
def unavailable_unless_installed(what: str, modules: Collection[str], *, extra: str | None = None,
                                 error: Callable[[str], TnsragError] = StrategyUnavailableError) -> Iterator[None]:
    """Inside the block, an :class:`ImportError` of one of ``modules`` raises ``error``
    (default :class:`StrategyUnavailableError`): "``what`` is not available in this
    installation (cannot import NAME)", plus the ``pip install`` line of ``extra``.

    Any other :class:`ImportError` propagates unchanged (see the module docstring).
    """
    try:
        yield
    except ImportError as exc:
        reraise_interrupt(exc)
        if not is_missing(exc, modules):
            raise
        raise error(f"{what} is not available in this installation (cannot import {exc.name})"
                    f"{_install_hint(extra)}") from exc
