"""Does a SQL statement stay inside one corpus?  (The Citus routing rule, checked statically.)

Every table the library shares between corpora is keyed by ``corpus`` first, which is
also the distribution key when the tables are distributed with Citus. A statement routes
to a single shard only when each shared table it reads or writes is pinned to one
corpus by an equality: ``t.corpus = <parameter or literal>``, or ``t.corpus = u.corpus``
where ``u`` is itself pinned (a co-located join). :func:`corpus_violations` parses a
statement with sqlglot (PostgreSQL dialect) and names every shared table reference that
is not pinned.

Exempt: statements that are not DML (DDL, ``ANALYZE``, ``SET``, ``EXPLAIN``, locks),
which Citus propagates to every shard by design, and statements that carry the marker
comment ``/* tnsrag:all-corpora */`` (a deliberate cross-corpus read, such as listing the
corpora of a schema; Citus runs those as multi-shard queries).

Approximation: table aliases are resolved by name across the whole statement, so two
subqueries reusing one alias for different tables could hide a violation; the
library's statements use distinct aliases.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import sqlglot
from sqlglot import exp

__all__ = ["ALL_CORPORA_MARKER", "SHARED_TABLES", "corpus_violations"]

#: Tables keyed by corpus that every store statement must pin to one corpus.
SHARED_TABLES = frozenset({"entries", "bm25_postings", "bm25_df", "bm25_stats", "embeddings", "edges",
                           "embedding_spaces", "bm25_docs", "bm25_blocks", "bm25_tombstones", "bm25_merge_state",
                           "entry_aliases"})
#: A statement carrying this comment reads several corpora on purpose.
ALL_CORPORA_MARKER = "tnsrag:all-corpora"

# Statements Citus propagates to every shard (or runs on the coordinator) by design.
_MAINTENANCE = re.compile(r"\s*(ANALYZE|VACUUM|SET|RESET|SHOW|LOCK|CREATE|DROP|ALTER|COMMENT|EXPLAIN|DO|"
                          r"BEGIN|COMMIT|ROLLBACK|SAVEPOINT|RELEASE|DISCARD)\b", re.I)
_DML = (exp.Select, exp.Union, exp.Update, exp.Delete, exp.Insert, exp.Merge)


class _Classes:
    """Union-find over corpus columns and constants."""

    def __init__(self) -> None:
        self._parent: dict[tuple[str, ...], tuple[str, ...]] = {}

    def find(self, key: tuple[str, ...]) -> tuple[str, ...]:
        self._parent.setdefault(key, key)
        while self._parent[key] != key:
            self._parent[key] = self._parent[self._parent[key]]
            key = self._parent[key]
        return key

    def union(self, a: tuple[str, ...], b: tuple[str, ...]) -> None:
        self._parent[self.find(a)] = self.find(b)

    def constants(self, key: tuple[str, ...]) -> set[tuple[str, ...]]:
        """The constants in the class of ``key``."""
        root = self.find(key)
        return {k for k in list(self._parent) if k[0] == "const" and self.find(k) == root}


def _unwrapped(node: exp.Expression) -> exp.Expression:
    """``node`` without casts, parentheses and scalar subqueries of one expression and no
    ``FROM`` (the runner's hidden corpus, ``(SELECT CAST(%(p)s AS text))``, pins as the
    parameter itself does)."""
    while True:
        if isinstance(node, (exp.Cast, exp.Paren)):
            node = node.this
        elif (isinstance(node, exp.Subquery) and isinstance(node.this, exp.Select)
              and not node.this.args.get("from_") and len(node.this.expressions) == 1):
            node = node.this.expressions[0]
        else:
            return node


def _is_const(node: exp.Expression) -> bool:
    node = _unwrapped(node)
    return isinstance(node, (exp.Placeholder, exp.Literal, exp.Parameter))


def _corpus_key(node: exp.Expression) -> tuple[str, ...] | None:
    node = _unwrapped(node)
    if isinstance(node, exp.Column) and node.name == "corpus":
        return ("col", node.table or "?")
    return None


def _key_or_const(node: exp.Expression, params: Mapping[str, object]) -> tuple[str, ...] | None:
    """The union-find key of a corpus column, or of a constant: a bound parameter is keyed by
    its value when it is known (two names bound to one corpus are one corpus), else by its
    SQL text."""
    if _is_const(node):
        node = _unwrapped(node)
        if isinstance(node, exp.Placeholder) and node.name in params:
            return ("const", repr(params[node.name]))
        return ("const", node.sql(dialect="postgres"))
    return _corpus_key(node)


def corpus_violations(statement: str, params: Mapping[str, object] | None = None) -> list[str]:
    """The shared-table references of ``statement`` that are not pinned to one corpus.

    ``params`` are the statement's bound parameters by name (pyformat ``%(name)s``), when
    known. Returns an empty list for a statement that stays in one corpus or is exempt (see the
    module docstring); a statement sqlglot cannot parse is reported as one violation.
    """
    if ALL_CORPORA_MARKER in statement or _MAINTENANCE.match(statement):
        return []
    try:
        trees = [t for t in sqlglot.parse(statement, read="postgres") if t is not None]
    except sqlglot.errors.ParseError as exc:
        return [f"unparsable statement ({str(exc).splitlines()[0]})"]
    out: list[str] = []
    for tree in trees:
        if isinstance(tree, _DML):
            out.extend(_tree_violations(tree, params or {}))
    return out


def _tree_violations(tree: exp.Expression, params: Mapping[str, object]) -> list[str]:
    classes = _Classes()
    for eq in tree.find_all(exp.EQ):
        left, right = _key_or_const(eq.left, params), _key_or_const(eq.right, params)
        if left is not None and right is not None and not (left[0] == right[0] == "const"):
            classes.union(left, right)
    tables = [t for t in tree.find_all(exp.Table) if t.name in SHARED_TABLES and not t.args.get("db") == "pg_catalog"]
    for join in tree.find_all(exp.Join):
        using = join.args.get("using") or []
        if any(getattr(u, "name", None) == "corpus" for u in using):
            # JOIN ... USING (corpus): the joined table shares the corpus of the tables before it.
            right = join.this
            if isinstance(right, exp.Table):
                select = join.parent
                sources = [select.args["from_"].this] if select is not None and select.args.get("from_") else []
                for src in sources:
                    if isinstance(src, exp.Table):
                        classes.union(("col", right.alias_or_name), ("col", src.alias_or_name))
    _pin_inserts(tree, classes, params)
    bad: list[str] = []
    seen: set[tuple[str, ...]] = set()
    for table in tables:
        alias = table.alias_or_name
        consts = classes.constants(("col", alias))
        if not consts and _sole_source(table):
            consts = classes.constants(("col", "?"))
        if not consts:
            bad.append(f"{table.name} (as {alias}) is not pinned to one corpus")
        seen |= consts
    if len(seen) > 1:
        bad.append(f"the statement spans several corpora ({', '.join(sorted(c[1] for c in seen))})")
    return bad


def _sole_source(table: exp.Table) -> bool:
    """Whether ``table`` is the only table of its SELECT/UPDATE/DELETE (unqualified columns are its)."""
    scope = table.find_ancestor(exp.Select, exp.Update, exp.Delete)
    if scope is None:
        return isinstance(table.parent, exp.Insert) or isinstance(table.parent, exp.Schema)
    own = [t for t in scope.find_all(exp.Table) if t.find_ancestor(exp.Select, exp.Update, exp.Delete) is scope]
    return len(own) == 1


def _pin_inserts(tree: exp.Expression, classes: _Classes, params: Mapping[str, object]) -> None:
    """An INSERT's target is pinned when the value it writes into ``corpus`` is."""
    for insert in tree.find_all(exp.Insert):
        target = insert.this
        columns: list[str] = []
        if isinstance(target, exp.Schema):
            columns = [c.name for c in target.expressions]
            target = target.this
        if not isinstance(target, exp.Table) or "corpus" not in columns:
            continue
        position = columns.index("corpus")
        source = insert.expression
        values: list[exp.Expression] = []
        if isinstance(source, exp.Values):
            for row in source.expressions:
                if isinstance(row, exp.Tuple) and position < len(row.expressions):
                    values.append(row.expressions[position])
        elif isinstance(source, exp.Select) and position < len(source.expressions):
            values.append(source.expressions[position].unalias())
        for value in values:
            key = _key_or_const(value, params)
            if key is not None:
                classes.union(("col", target.alias_or_name), key)
