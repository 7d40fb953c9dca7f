"""The health report: the wire contract between a node's agent and the reconciler.

What a node's agent writes and the reconciler reads: the health words (``health``), the
XID catalogue (``xid``), the report document (``health_report``), the acceptance suite's
words (``acceptance``), how a report is signed (``signing``), and the compatibility and
time helpers they share (``compat``, ``timefmt``). Every module here ships to GPU nodes in
the agent bundle (Python 3.9, the standard library and the libraries the bundle vendors),
so the wing imports only itself and ``navarch.errors`` (tests/docs/test_layout.py).
"""
