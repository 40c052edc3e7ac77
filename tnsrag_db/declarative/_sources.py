"""Knowledge sources: ``@knowledge_source`` (``SourceLoader`` and ``FileLoader`` live in ``tnsrag_db._loaders``).

A role class declares where its corpus comes from with one or more
``@knowledge_source(...)`` decorators: file paths, directories or globs (read by
:class:`FileLoader`) or a custom :class:`SourceLoader`. Loading happens when an action
first retrieves (never at class definition); see the runtime for ingestion.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

from tnsrag_db._errors import ConfigurationError, InvalidEntryError
from tnsrag_db._loaders import FileLoader, SourceLoader
from tnsrag_db._types import MemoryEntry, MemoryTier

__all__ = [
    "FileLoader",
    "KnowledgeSource",
    "SourceLoader",
    "collect_sources",
    "knowledge_source",
]

SOURCES_ATTRIBUTE = "__tnsrag_knowledge_sources__"

_T = TypeVar("_T", bound=type)


@dataclass(frozen=True, slots=True)
class KnowledgeSource:
    """One declared source of a role: a loader, its name, optional corpus and extra metadata."""

    name: str
    loader: SourceLoader
    corpus: str | None = None
    metadata: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def entries(self) -> list[MemoryEntry]:
        """Load the entries, attributing the source name (when an entry has none) and ``metadata``.

        The loader's own metadata wins over the source-level ``metadata`` defaults.
        """
        out: list[MemoryEntry] = []
        for index, entry in enumerate(self.loader.load()):
            if not isinstance(entry, MemoryEntry):
                raise InvalidEntryError(f"knowledge source {self.name!r}: loader item {index} is a "
                                        f"{type(entry).__name__}, not a MemoryEntry", index=index)
            changes: dict[str, Any] = {}
            if entry.source is None:
                changes["source"] = self.name
            if self.metadata:
                changes["metadata"] = {**self.metadata, **entry.metadata}
            out.append(replace(entry, **changes) if changes else entry)
        return out


def _module_dir(cls: type) -> Path:
    module = sys.modules.get(cls.__module__)
    file = getattr(module, "__file__", None)
    return Path(file).resolve().parent if file else Path.cwd()


def knowledge_source(
    *paths: str | os.PathLike[str],
    loader: SourceLoader | None = None,
    corpus: str | None = None,
    tier: MemoryTier | str = MemoryTier.SEMANTIC,
    metadata: Mapping[str, str] | None = None,
    name: str | None = None,
    base_dir: str | os.PathLike[str] | None = None,
) -> Callable[[_T], _T]:
    """Declare a knowledge source on a role class (stackable; subclasses inherit them).

    Give file ``paths`` (files, directories, globs; read by :class:`FileLoader`, relative
    ones against ``base_dir``, default the directory of the module defining the class)
    **or** a custom ``loader``. ``corpus`` (default: the bound store's corpus) must be the
    same for every source of a class. ``tier`` (default SEMANTIC) applies to file
    entries; ``metadata`` is attached to every entry of this source (entry keys win);
    ``name`` (default: the patterns or the loader's ``name``) becomes the ``source`` of
    entries that have none. Raises :class:`ConfigurationError` for bad options; no file is
    read until an action retrieves.
    """
    if loader is not None and paths:
        raise ConfigurationError("@knowledge_source takes file paths or a loader=, not both")
    if loader is None and not paths:
        raise ConfigurationError("@knowledge_source needs file paths, directories or globs, or a loader=")
    if loader is not None and not callable(getattr(loader, "load", None)):
        raise ConfigurationError(f"loader must have a load() method returning MemoryEntry objects, "
                                 f"got {type(loader).__name__}")
    if corpus is not None and (not isinstance(corpus, str) or not corpus.strip()):
        raise ConfigurationError(f"corpus must be None or a non-blank string, got {corpus!r}")
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise ConfigurationError(f"name must be None or a non-blank string, got {name!r}")
    extra: dict[str, str] = {}
    for key, value in (metadata or {}).items():
        if not isinstance(key, str) or not key.strip() or not isinstance(value, str):
            raise ConfigurationError(f"knowledge source metadata must map non-blank str keys to str values, "
                                     f"got {key!r}: {value!r}")
        extra[key] = value
    if paths:
        FileLoader(*paths, tier=tier)  # validates patterns and tier now

    def decorate(cls: _T) -> _T:
        if not isinstance(cls, type):
            raise ConfigurationError("@knowledge_source decorates a role class")
        chosen = loader if loader is not None else FileLoader(
            *paths, base_dir=base_dir if base_dir is not None else _module_dir(cls), tier=tier)
        label = name or getattr(chosen, "name", None) or type(chosen).__name__
        source = KnowledgeSource(str(label), chosen, corpus, MappingProxyType(extra))
        own: tuple[KnowledgeSource, ...] = cls.__dict__.get(SOURCES_ATTRIBUTE, ())
        # Class decorators apply bottom-up; prepending keeps the sources in reading order.
        setattr(cls, SOURCES_ATTRIBUTE, (source, *own))
        return cls

    return decorate


def collect_sources(cls: type) -> tuple[tuple[KnowledgeSource, ...], str | None]:
    """The knowledge sources of ``cls`` (bases first) and their common corpus (None = the store's).

    Raises :class:`ConfigurationError` when the sources name different corpora.
    """
    sources: list[KnowledgeSource] = []
    for klass in reversed(cls.__mro__):
        sources.extend(klass.__dict__.get(SOURCES_ATTRIBUTE, ()))
    corpora = {s.corpus for s in sources if s.corpus is not None}
    if len(corpora) > 1:
        raise ConfigurationError(f"the knowledge sources of {cls.__qualname__} name different corpora "
                                 f"({', '.join(sorted(corpora))}); one role retrieves from one corpus")
    return tuple(sources), (corpora.pop() if corpora else None)

