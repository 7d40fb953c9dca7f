"""NodeTable: Memory's nodes as a persistent map, the speed structure under the data model.

Kept out of navarch.planner.model (plain data) because it is a fast path: its shape is
chosen by bench/scale.py's figures at 100,000 nodes, not by what a node's memory means.
Generic over what it holds (anything with a `node` name: NodeMemory) so it depends on no
part of the model. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Generic, Protocol, TypeVar

from pyrsistent import PMap, pmap


class Named(Protocol):
    """What a NodeTable holds: a value that knows its node name."""

    @property
    def node(self) -> str: ...


N = TypeVar("N", bound=Named)


class NodeTable(Generic[N]):
    """Memory's nodes: an immutable table of NodeMemory (any N with a `node` name) keyed by
    node name.

    A persistent hash map (pyrsistent's PMap): a lookup or a single update is O(log N), so
    a run that touches every node of a 100,000-node fleet stays O(N log N)
    (bench/scale.py). Read-only views of it: iteration yields the N values in
    node-name order (the order state/<fleet>.json is written in; sorted once per table, the
    first time it is iterated), and view() is the map itself as a Mapping.

    A table built from nodes (a loaded state, a bulk update) keeps the plain dict it was
    built from, never changed after, for lookups and ordering, and makes its PMap only when
    a single update, an equality or a view needs one: a PMap lookup is about ten times a
    dict's, and a run looks up every loaded node several times and may never update one. A
    table made by one set() or discard() has no such dict: copying it would make each
    single update O(N).
    """

    __slots__ = ("_pmap", "_ordered", "_index")

    def __init__(self, nodes: Iterable[N] | PMap[str, N] = ()) -> None:
        self._index: dict[str, N] | None = None
        self._pmap: PMap[str, N] | None = None
        if isinstance(nodes, PMap):
            self._pmap = nodes
        else:
            self._index = {n.node: n for n in nodes}
        self._ordered: tuple[N, ...] | None = None

    @property
    def _map(self) -> PMap[str, N]:
        if self._pmap is None:
            assert self._index is not None
            self._pmap = pmap(self._index)
        return self._pmap

    def _lookup(self) -> Mapping[str, N]:
        return self._index if self._index is not None else self._map

    def __getitem__(self, name: str) -> N:
        return self._lookup()[name]

    def get(self, name: str, default: N | None = None) -> N | None:
        """The named node's memory, or default. O(log N)."""
        if self._index is not None:
            return self._index.get(name, default)
        return self._map.get(name, default)

    def __contains__(self, name: object) -> bool:
        return name in self._lookup()

    def __len__(self) -> int:
        return len(self._lookup())

    def __iter__(self) -> Iterator[N]:
        if self._ordered is None:
            m = self._lookup()
            self._ordered = tuple(m[k] for k in sorted(m))
        return iter(self._ordered)

    def names(self) -> tuple[str, ...]:
        """Node names in order."""
        return tuple(n.node for n in self)

    def view(self) -> Mapping[str, N]:
        """A read-only mapping node name -> N (the map itself)."""
        return self._map

    def set(self, nm: N) -> NodeTable[N]:
        """A copy with nm replacing the node of its name (or added). O(log N)."""
        return NodeTable(self._map.set(nm.node, nm))

    def discard(self, name: str) -> NodeTable[N]:
        """A copy without the named node (no error when absent). O(log N)."""
        return NodeTable(self._map.discard(name))

    def updated(self, nodes: Iterable[N], without: Iterable[str] = ()) -> NodeTable[N]:
        """A copy with every node of `nodes` set and every name of `without` removed (one
        batch through the map's evolver: cheaper than a set() per node). When the batch
        changes a large share of the table (a quarter or more), the copy is built afresh
        from a dict instead: an evolver's update costs several times a dict's."""
        changed = list(nodes)
        current = self._lookup()
        gone = [name for name in dict.fromkeys(without) if name in current]
        if len(changed) + len(gone) >= max(len(current), 1) // 4:
            table = dict(current)
            for name in gone:
                del table[name]
            for nm in changed:
                table[nm.node] = nm
            return NodeTable(table.values())
        e = self._map.evolver()
        for name in gone:
            del e[name]
        for nm in changed:
            e[nm.node] = nm
        return NodeTable(e.persistent())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, NodeTable):
            if self._index is not None and other._index is not None:
                return self._index == other._index
            return self._map == other._map
        if isinstance(other, tuple):
            return tuple(self) == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._map)

    def __repr__(self) -> str:
        return f"NodeTable({list(self)!r})"
