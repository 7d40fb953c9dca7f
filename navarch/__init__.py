"""navarch: keeps fleets of cloud GPU machines healthy, with no server.

See README.md for the glossary and ../DESIGN for the architecture: a pure planner
(`navarch.planner`) between three narrow I/O seams (`navarch.providers`,
`navarch.stores`, `navarch.remote`).
"""

__version__ = "0.1.0"
