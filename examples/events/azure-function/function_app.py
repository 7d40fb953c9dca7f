"""navarch's event-started runs as an Azure Function on a storage-queue trigger
(docs/events.md): Event Grid writes each BlobCreated event of the fleet's health prefix to
the queue `navarch events setup FLEET` made; the Functions host calls this function per
message and deletes the message when it returns (it retries, then moves it to the poison
queue, when it raises: another run held the lease, the store failed).

Deploy: a Python function app (programming model v2) with `navarch[azure]` in
requirements.txt, fleet.yaml beside this file, app settings NAVARCH_FLEET_SECRET and
`NavarchQueue` (the storage account's connection, or identity-based `NavarchQueue__queueServiceUri`).
host.json: `"extensions": {"queues": {"batchSize": 1, "messageEncoding": "base64"}}` keeps
one run at a time per instance; the store lease guards the rest. Keep the periodic run.
"""

from __future__ import annotations

import logging
from pathlib import Path

import azure.functions as func

from navarch import api
from navarch.actor import Actor, ActorKind
from navarch.events.messages import Watch, parse_event_grid_message

app = func.FunctionApp()
FLEET = Path(__file__).with_name("fleet.yaml")


@app.queue_trigger(arg_name="msg", queue_name="navarch-demo-events", connection="NavarchQueue")
def navarch_events(msg: func.QueueMessage) -> None:
    fleet = api.load_fleet(FLEET)
    watch = Watch.of_store(fleet.spec.store_url, fleet.name)
    # The host hands over the decoded text; the parser also reads base64 and plain JSON.
    parsed = parse_event_grid_message(msg.get_body(), watch)
    if parsed.ignored:
        logging.info("navarch events: ignored %s", parsed.ignored_text())
    if not parsed.keys and not parsed.instances:
        return
    api.apply(
        fleet,
        api.ApplyOptions(
            auto_approve=True,
            reports_named=None if parsed.named is None else frozenset(parsed.named),
            actor=Actor(ActorKind.SCHEDULED, name="azure-function", job="store event"),
        ),
    )
