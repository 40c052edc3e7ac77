"""tnsrag_db._plugins: a missing optional module is "not available"; any other import error is a bug to show."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Iterator, Sequence
from types import ModuleType

import pytest
from click.testing import CliRunner

from tnsrag_db._errors import StrategyUnavailableError
from tnsrag_db._plugins import is_missing, unavailable_unless_installed


class _Block(importlib.abc.MetaPathFinder):
    """Makes ``name`` (and everything below it) uninstalled, as pip uninstall would."""

    def __init__(self, name: str) -> None:
        self.name = name

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> None:
        if fullname == self.name or fullname.startswith(self.name + "."):
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


@pytest.fixture
def no_mcp(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The mcp package blocked for the test (its loaded modules and our integration forgotten)."""
    for name in [n for n in sys.modules if n == "mcp" or n.startswith("mcp.") or n == "tnsrag_db.integrations.mcp"]:
        monkeypatch.delitem(sys.modules, name)
    block = _Block("mcp")
    sys.meta_path.insert(0, block)
    try:
        yield
    finally:
        sys.meta_path.remove(block)


def test_a_missing_optional_package_is_unavailable_and_names_the_extra(no_mcp: None) -> None:
    with pytest.raises(StrategyUnavailableError) as info:
        with unavailable_unless_installed("the MCP server", ("mcp",), extra="mcp"):
            importlib.import_module("tnsrag_db.integrations.mcp")  # which imports mcp
    assert str(info.value) == ("the MCP server is not available in this installation (cannot import mcp); "
                               "install it with: pip install 'tnsrag-db[mcp]'")
    assert isinstance(info.value.__cause__, ImportError)


def test_the_mcp_command_names_the_extra_when_mcp_is_missing(no_mcp: None) -> None:
    from tnsrag_db._cli import main_group

    res = CliRunner().invoke(main_group, ["mcp", "--corpus", "x"])
    assert res.exit_code == 1 and res.output == ("error: tnsrag mcp needs the [mcp] extra, and module 'mcp' is not "
                                                 "installed: pip install 'tnsrag-db[mcp]'\n"), res.output


def test_an_import_error_inside_a_module_that_is_there_propagates() -> None:
    # The optional module is installed; something it imports is not (a bug, or a broken
    # dependency): the traceback must show that, never "not available".
    with pytest.raises(ModuleNotFoundError) as info:
        with unavailable_unless_installed("strategy 'x'", ("tnsrag_db._strategies.keyword",)):
            raise ModuleNotFoundError("No module named 'tnsrag_db_no_such_dependency'",
                                      name="tnsrag_db_no_such_dependency")
    assert info.value.name == "tnsrag_db_no_such_dependency"
    with pytest.raises(ImportError, match="cannot import name"):  # a renamed function
        with unavailable_unless_installed("strategy 'x'", ("tnsrag_db._strategies.keyword",)):
            from tnsrag_db._strategies.keyword import no_such_function  # type: ignore[attr-defined]  # noqa: F401


@pytest.mark.parametrize(("name", "missing"), [
    ("mcp", True),                                 # the package itself
    ("tnsrag_db._strategies.reasoning", True),      # one of ours left out of the installation
    ("tnsrag_db._strategies", True),                # the package that would hold it
    ("mcp.server", False),                         # below it: mcp is there, something in it failed
    ("numpy", False),                              # something else
    (None, False),                                 # an error that names no module
])
def test_is_missing_reads_the_module_name_of_the_error(name: str | None, missing: bool) -> None:
    assert is_missing(ModuleNotFoundError("x", name=name), ("mcp", "tnsrag_db._strategies.reasoning")) is missing
    # "cannot import name X from mcp": mcp is installed, X is not in it.
    assert not is_missing(ImportError("cannot import name 'X'", name=name), ("mcp", "tnsrag_db._strategies.reasoning"))


def _hidden_interrupt() -> ImportError:
    """What numpy's extension initialisation raises when Ctrl-C lands during the import."""
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise ImportError("initialization failed")  # noqa: B904 -- the implicit context is what is tested
    except ImportError as exc:
        return exc


def test_an_interrupt_hidden_in_an_import_error_is_raised_again() -> None:
    from tnsrag_db._plugins import reraise_interrupt

    with pytest.raises(KeyboardInterrupt):
        reraise_interrupt(_hidden_interrupt())
    reraise_interrupt(ImportError("No module named 'x'"))  # a real missing package: nothing


def test_a_ctrl_c_during_the_model_s_import_is_not_a_missing_model(monkeypatch: pytest.MonkeyPatch) -> None:
    # Before: shipped_model_available() said False, and tnsrag ingest went on with the hash
    # fallback, the Ctrl-C lost (exit 0 in the real-SIGINT test).
    from tnsrag_db.embeddings import _shipped

    def interrupted(name: str) -> object:
        raise _hidden_interrupt()

    monkeypatch.setattr(_shipped, "import_module", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _shipped.shipped_model_available()
    with pytest.raises(KeyboardInterrupt):
        _shipped._load_shipped()


def test_unavailable_unless_installed_lets_an_interrupt_through() -> None:
    from tnsrag_db._plugins import unavailable_unless_installed

    with pytest.raises(KeyboardInterrupt):
        with unavailable_unless_installed("x", ("numpy",)):
            raise _hidden_interrupt()
