"""What a run tells the world after it: notifications, metrics, the status page.

    events.py    Event (kind, severity, fleet, pool, node, message, details) derived from
                 an RunResult (outcomes, plan halts) or an error
    state.py     which conditions are active: state/<fleet>.notify.json (CAS)
    sinks.py     log, webhook (HMAC-SHA256 signed), slack, pagerduty (Events API v2)
    dispatch.py  notify_run(): events -> sinks, failures logged and counted, never raised
    metrics.py   the run's Prometheus metrics: node_exporter textfile and pushgateway
    status_page.py  the fleet's static status page in the store
    unattended.py   the after-run work of a batch job: exit codes, notify, metrics, page

Import the submodules directly; this package imports nothing (the agent's timer job and
`navarch validate` stay fast).
"""
