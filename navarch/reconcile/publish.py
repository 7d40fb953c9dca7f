"""Deliver the agent to new nodes: publish the bundle to the fleet's store, hand out its URL.

``apply`` calls ``AgentDelivery.for_store(store).get()`` the first time it renders a node's
user-data: the bundle for this navarch version (navarch.agent.bundle) is put at its
content-addressed key ``agent/<version>-<sha256>.pyz`` unless a listing shows it there
already (create-if-absent: an object at that key is never overwritten, and a racing
reconciler that wrote it first wrote the same bytes), and a short-lived pre-signed GET URL
for it goes into the user-data with the sha256 the node checks. Nodes need no credentials
for the store's agent/ prefix and no package index.
"""

from __future__ import annotations

import threading

from navarch.agent.bootstrap import BundleSource
from navarch.errors import PreconditionFailed
from navarch.stores.base import ObjectStore

__all__ = ["BundleSource", "AgentDelivery", "publish_agent_bundle", "PRESIGNED_URL_TTL_S"]

#: How long a node may take from launch to fetching the bundle. Instances boot in minutes;
#: an hour covers a slow image pull and cloud-init's retries while keeping a leaked
#: user-data's URL short-lived.
PRESIGNED_URL_TTL_S = 3600


def publish_agent_bundle(store: ObjectStore) -> tuple[str, str]:
    """Put this version's bundle at agent/<version>-<sha256>.pyz unless present.

    Returns (key, sha256). One LIST of that key and, the first time only, one create-if-
    absent PUT of about 0.25 MB. Raises StoreError when the store cannot be listed or
    written (the caller's apply then fails the provisioning, never launches a mute node).
    """
    from navarch.agent.bundle import build_bundle

    bundle = build_bundle()
    if not any(info.key == bundle.key for info in store.list(bundle.key)):
        try:
            store.put(bundle.key, bundle.data, if_absent=True)
        except PreconditionFailed:
            pass  # another reconciler published it first; same key, same bytes
    return bundle.key, bundle.sha256


class AgentDelivery:
    """Publishes once per apply, on first use, and hands every node the same source.

    Thread-safe: the executor renders user-data on several threads at once.
    """

    def __init__(self, store: ObjectStore, ttl_s: int = PRESIGNED_URL_TTL_S) -> None:
        self._store = store
        self._ttl_s = ttl_s
        self._lock = threading.Lock()
        self._source: BundleSource | None = None

    def get(self) -> BundleSource:
        """The bundle's pre-signed URL and sha256; publishes the bundle the first time.

        Raises StoreError (publishing or signing failed).
        """
        with self._lock:
            if self._source is None:
                key, sha256 = publish_agent_bundle(self._store)
                url = self._store.presigned_get_url(key, self._ttl_s)
                self._source = BundleSource(url=url, sha256=sha256)
            return self._source
