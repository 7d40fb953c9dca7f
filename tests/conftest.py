"""Fixtures every test package may use: the real local servers the seams are tested on.

One instance of each session server serves the whole run, whichever packages it collects
(tests/aws, tests/gcp, tests/lambda_cloud, tests/contracts, ...). The servers live in
tests/support; they start only when a test asks for them.
"""

import gc
from collections.abc import Iterator

import pytest

from tests.support.azure_servers import (  # noqa: F401
    arm_endpoint,
    arm_server,
    az_container,
    azurite,
    fake_arm,
)
from tests.support.fake_compute import compute_endpoint, compute_server, fake_compute  # noqa: F401
from tests.support.fake_lambda import fake_lambda, lambda_api_base, lambda_server  # noqa: F401
from tests.support.gcs_server import gcs_bucket, gcs_env, gcs_server  # noqa: F401
from tests.support.moto_server import moto, moto_server  # noqa: F401


@pytest.fixture(autouse=True)
def _collector_restored() -> Iterator[None]:
    """Give each test the garbage collector as it found it.

    Tests call `navarch.cli.main` in this process, and a CLI run tunes the collector for a
    process that exits soon after: it freezes every object alive (cyclic garbage included,
    which is then never collected) and raises the thresholds. Left in place, that changes
    when every later test's garbage is collected."""
    threshold = gc.get_threshold()
    enabled = gc.isenabled()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)
    if enabled:
        gc.enable()
