"""NodeTable: Memory's nodes as a persistent map, the speed structure under the data model.

Kept out of navarch.planner.model (plain data) because it is a fast path: its shape is
chosen by bench/scale.py's figures at 100,000 nodes, not by what a node's memory means.
Generic over what it holds (anything with a `node` name: NodeMemory) so it depends on no
part of the model. Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Generic, Protocol, TypeVar

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

    __slots__ = ("_pmap", "_ordered", "_index", "_lazy")

    def __init__(self, nodes: Iterable[N] | PMap[str, N] = ()) -> None:
        self._index: dict[str, N] | None = None
        self._pmap: PMap[str, N] | None = None
        self._lazy: _Lazy[N] | None = None
        if isinstance(nodes, PMap):
            self._pmap = nodes
        else:
            self._index = {n.node: n for n in nodes}
        self._ordered: tuple[N, ...] | None = None

    @classmethod
    def lazy(cls, entries: Mapping[str, Any], decode: Callable[[str, Any], N]) -> NodeTable[N]:
        """A table of the nodes `entries` encode (node name -> entry), each decoded by
        decode(name, entry) the first time it is looked up: a run that reads a few nodes of
        a 100,000-node state decodes only those (bench/scale.py, event_vs_floor_100k).
        Iterating, comparing or a single set()/discard() decodes every node once; updated()
        without removals stays lazy. The entries are shared: never change them. decode's
        errors (a malformed entry) are raised by the lookup that decodes it."""
        return cls._of(_Lazy(entries, decode, {}, {}))

    @staticmethod
    def _of(lazy: _Lazy[N]) -> NodeTable[N]:
        table: NodeTable[N] = NodeTable()
        table._index = None
        table._lazy = lazy
        return table

    def lazy_entries(self) -> tuple[Mapping[str, Any], Mapping[str, N]] | None:
        """For a lazy table whose nodes were not all decoded: (the entries it was made
        from, the nodes updated() set since, by name), so an encoder writes the entries of
        the others back as they were read; None for any other table."""
        if self._lazy is None:
            return None
        return self._lazy.entries, self._lazy.changed

    def _materialise(self) -> None:
        """Decode every node of a lazy table (each once): it is a plain table from then on."""
        lazy = self._lazy
        if lazy is None:
            return
        index: dict[str, N] = {}
        for name in lazy.entries:
            nm = lazy.get(name)
            if nm is not None:
                index[name] = nm
        index.update(lazy.changed)
        self._index = index
        self._lazy = None

    @property
    def _map(self) -> PMap[str, N]:
        if self._pmap is None:
            self._materialise()
            assert self._index is not None
            self._pmap = pmap(self._index)
        return self._pmap

    def _lookup(self) -> Mapping[str, N]:
        self._materialise()
        return self._index if self._index is not None else self._map

    def __getitem__(self, name: str) -> N:
        if self._lazy is not None:
            found = self._lazy.get(name)
            if found is None:
                raise KeyError(name)
            return found
        return self._lookup()[name]

    def get(self, name: str, default: N | None = None) -> N | None:
        """The named node's memory, or default. O(log N)."""
        if self._lazy is not None:
            found = self._lazy.get(name)
            return default if found is None else found
        if self._index is not None:
            return self._index.get(name, default)
        return self._map.get(name, default)

    def __contains__(self, name: object) -> bool:
        if self._lazy is not None:
            return name in self._lazy.changed or name in self._lazy.entries
        return name in self._lookup()

    def __len__(self) -> int:
        if self._lazy is not None:
            lazy = self._lazy
            return len(lazy.entries) + sum(1 for n in lazy.changed if n not in lazy.entries)
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
        from a dict instead: an evolver's update costs several times a dict's. A lazy
        table (lazy()) stays lazy when nothing is removed: its new nodes are set aside."""
        changed = list(nodes)
        removed = list(without)
        if self._lazy is not None and not removed:
            lazy = self._lazy
            updates = {**lazy.changed, **{nm.node: nm for nm in changed}}
            return NodeTable._of(_Lazy(lazy.entries, lazy.decode, lazy.decoded, updates))
        current = self._lookup()
        gone = [name for name in dict.fromkeys(removed) if name in current]
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


class _Lazy(Generic[N]):
    """A lazy NodeTable's nodes: the entries it was made from, the nodes decoded so far
    (kept, so a node looked up twice is the same object), and the nodes set since."""

    __slots__ = ("entries", "decode", "decoded", "changed")

    def __init__(
        self,
        entries: Mapping[str, Any],
        decode: Callable[[str, Any], N],
        decoded: dict[str, N],
        changed: dict[str, N],
    ) -> None:
        self.entries = entries
        self.decode = decode
        self.decoded = decoded
        self.changed = changed

    def get(self, name: str) -> N | None:
        """The named node (decoded now if not yet), or None."""
        found = self.changed.get(name)
        if found is not None:
            return found
        found = self.decoded.get(name)
        if found is None and name in self.entries:
            found = self.decoded[name] = self.decode(name, self.entries[name])
        return found
