"""The hierarchy checks' pure part: the cycles of a parent map and the one error naming
every problem found (see :class:`~tnsrag_db._indexes.hierarchy.HierarchyIndex`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tnsrag_db._errors import HierarchyError

__all__ = ["MESSAGE_LIMIT", "cycles_of", "raise_problems"]

#: How many problems an error message spells out before summarising the rest.
MESSAGE_LIMIT = 20


def cycles_of(successor: dict[str, str]) -> list[list[str]]:
    """Every cycle of a functional graph (each node has at most one successor), each in walk order."""
    state: dict[str, int] = {}  # 1 = on the current walk, 2 = finished
    cycles: list[list[str]] = []
    for start in sorted(successor):
        if start in state:
            continue
        walk: list[str] = []
        node: str | None = start
        while node is not None and node not in state:
            state[node] = 1
            walk.append(node)
            node = successor.get(node)
        if node is not None and state[node] == 1:
            cycles.append(walk[walk.index(node):])
        for visited in walk:
            state[visited] = 2
    return cycles


def normalised(cycle: list[str]) -> tuple[str, ...]:
    """The cycle rotated to start at its smallest id, so one cycle has one spelling."""
    first = cycle.index(min(cycle))
    return tuple(cycle[first:] + cycle[:first])


def raise_problems(missing: Sequence[tuple[str, str]], cycles: Iterable[Sequence[str]], where: str) -> None:
    """Raise one :class:`HierarchyError` for missing parents and cycles, if there are any."""
    unique_cycles = sorted({normalised(list(c)) for c in cycles})
    if not missing and not unique_cycles:
        return
    parts: list[str] = []
    if missing:
        shown = ", ".join(f"{child!r} -> {parent!r}" for child, parent in missing[:MESSAGE_LIMIT])
        more = f" and {len(missing) - MESSAGE_LIMIT} more" if len(missing) > MESSAGE_LIMIT else ""
        parts.append(f"missing parents ({shown}{more})")
    for cycle in unique_cycles[:MESSAGE_LIMIT]:
        parts.append("cycle " + " -> ".join(repr(i) for i in (*cycle, cycle[0])))
    if len(unique_cycles) > MESSAGE_LIMIT:
        parts.append(f"{len(unique_cycles) - MESSAGE_LIMIT} more cycles")
    ids: list[str] = [child for child, _ in missing]
    for cycle in unique_cycles:
        ids.extend(i for i in cycle if i not in ids)
    raise HierarchyError(f"invalid hierarchy {where}: " + "; ".join(parts), tuple(ids))
