"""How navarch says a count in English, so no line says "node(s)"."""

from __future__ import annotations


def counted(n: int, noun: str, plural: str = "") -> str:
    """ "1 node", "3 nodes", "0 nodes": n and the noun, plural unless n is 1. plural: the
    plural form when it is not noun + "s" (e.g. "zones/types")."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"
