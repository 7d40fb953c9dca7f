"""Object store backends, chosen by URL: file://DIR, s3://bucket/prefix, gs://bucket/prefix,
az://account/container/prefix, then navarch.stores plugins by scheme."""

from __future__ import annotations

from pathlib import Path

from navarch.errors import ConfigError
from navarch.extras import import_extra
from navarch.stores.base import Blob, ObjectInfo, ObjectStore
from navarch.stores.plugin import open_plugin_store

__all__ = ["Blob", "ObjectInfo", "ObjectStore", "open_store"]


def open_store(url: str, *, base_dir: Path | None = None) -> ObjectStore:
    """Open the store named by url.

    file:// URLs may be relative ("file://.navarch/store"); they are resolved against
    base_dir (the fleet file's directory) when given. Other schemes come from the
    navarch.stores entry-point group (navarch.stores.plugin). Raises ConfigError for an unknown
    scheme, PluginError for a broken plugin.
    """
    if url.startswith("file://"):
        from navarch.stores.file import FileStore

        path = Path(url[len("file://") :])
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        return FileStore(path)
    if url.startswith("s3://"):
        s3 = import_extra("navarch.stores.s3", "aws", "the s3:// store")
        store: ObjectStore = s3.S3Store.from_url(url)
        return store
    if url.startswith("gs://"):
        gcs = import_extra("navarch.stores.gcs", "gcp", "the gs:// store")
        gcs_store: ObjectStore = gcs.GCSStore.from_url(url)
        return gcs_store
    if url.startswith("az://"):
        azure = import_extra("navarch.stores.azure", "azure", "the az:// store")
        azure_store: ObjectStore = azure.AzureBlobStore.from_url(url)
        return azure_store
    # Built-ins first; then plugins of the navarch.stores entry-point group, by URL scheme.
    plugin = open_plugin_store(url)
    if plugin is not None:
        return plugin
    raise ConfigError(
        f"unknown store URL {url!r}",
        hint="use file://DIR, s3://bucket/prefix or gs://bucket/prefix, or install a plugin "
        "of the navarch.stores entry-point group for its scheme",
    )
