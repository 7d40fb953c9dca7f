"""Notifications of unattended runs: typed events, sinks, dedup state.

    events.py    Event (kind, severity, fleet, pool, node, message, details) derived from
                 an ApplyResult (outcomes, plan halts) or an error
    state.py     which conditions are active: state/<fleet>.notify.json (CAS)
    sinks.py     log, webhook (HMAC-SHA256 signed), slack, pagerduty (Events API v2)
    dispatch.py  notify_run(): events -> sinks, failures logged and counted, never raised

Import the submodules directly; this package imports nothing (the agent's timer job and
`navarch validate` stay fast).
"""
