"""Fixtures every test package may use: the real local servers the seams are tested on.

One instance of each session server serves the whole run, whichever packages it collects
(tests/aws, tests/gcp, tests/lambda_cloud, tests/contracts, ...). The servers live in
tests/support; they start only when a test asks for them.

Tiers: a test that starts a daemon or needs a system package is marked `system`
(pytest_collection_modifyitems below, from the fixtures it uses; an explicit
`@pytest.mark.system` where no fixture tells), so `pytest -m "not system"` runs the fast
tier alone. A test marked `slow` (minutes of CPU: a shipped simulator scenario run in full)
is the nightly tier: skipped unless NAVARCH_NIGHTLY=1, so the CI suite stays in its budget
(`NAVARCH_NIGHTLY=1 python3 -m pytest -m slow` runs it).
"""

import compileall
import gc
import os
import sys
from collections.abc import Iterator
from pathlib import Path

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
from tests.support.fake_logging_fixtures import (  # noqa: F401
    fake_logging,
    logging_server,
    sinks_client,
)
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


#: Fixtures that start a daemon (a server process or one of the system's daemons): a test
#: using any of them, directly, through another fixture, or as the parameter of a
#: parametrized fixture (tests/contracts), is a `system` test.
DAEMON_FIXTURES = frozenset(
    {
        # tests/support: moto, fake-gcs-server, Azurite, the fake ARM, Compute, Logging and Lambda APIs
        "moto_server",
        "moto",
        "gcs_server",
        "gcs_env",
        "gcs_bucket",
        "azurite",
        "az_container",
        "arm_server",
        "fake_arm",
        "compute_server",
        "fake_compute",
        # the fake Cloud Logging ConfigServiceV2 (gRPC) of events setup's log sink
        "logging_server",
        "fake_logging",
        "sinks_client",
        "lambda_server",
        "fake_lambda",
        # tests/contracts: the store and provider contracts on those servers
        "s3_store_url",
        "gcs_store_url",
        "azure_store_url",
        "aws_cloud",
        "gcp_cloud",
        "lambda_cloud",
        "azure_cloud",
        # tests/remote and tests/slurm: a real sshd and a real one-node Slurm
        "sshd",
        "standin",
        "slurm_cluster",
        "slurm_sshd",
        "slurm",
        # tests/metrics: the Pushgateway, node_exporter and Prometheus
        "pushgateway",
        "scraped",
    }
)


#: A RAM-backed directory, where the machine has one, for the tests' scratch files.
TMPFS = Path("/dev/shm")
#: Room the whole suite's scratch files need there with some to spare (a few hundred MiB
#: while it runs); a smaller tmpfs, such as a container's default 64 MiB, is passed over.
TMPFS_MIN_FREE_BYTES = 2 * 1024**3


def pytest_configure(config: pytest.Config) -> None:
    """In the controlling process, before any worker starts: put tmp_path on a tmpfs, and
    compile navarch's bytecode once where Python writes it (not under
    PYTHONDONTWRITEBYTECODE), so the workers and the `python -m navarch` processes tests
    start load it instead of each compiling the package on a fresh clone."""
    if hasattr(config, "workerinput"):
        return  # a worker takes its basetemp from the controller
    _scratch_on_tmpfs(config)
    if not sys.dont_write_bytecode:
        compileall.compile_dir(Path(__file__).resolve().parents[1] / "navarch", quiet=1, workers=0)


def _scratch_on_tmpfs(config: pytest.Config) -> None:
    """Root pytest's numbered temporary directories in TMPFS when it has room (pytest's
    documented PYTEST_DEBUG_TEMPROOT), unless the run names a basetemp or a root itself.

    The tests write, fsync, rename and delete tens of thousands of small files (stores,
    state, journals, each test's tmp_path). On a virtual disk those calls wait on the
    device: on ext4 mounted with discard, tests/cli, tests/reconcile and tests/executor
    spent 13 s of system CPU, and 6 s with their files on /dev/shm. The code under test
    makes the same calls either way."""
    if config.option.basetemp or os.environ.get("PYTEST_DEBUG_TEMPROOT"):
        return
    try:
        fs = os.statvfs(TMPFS)
    except OSError:
        return
    if fs.f_bavail * fs.f_frsize >= TMPFS_MIN_FREE_BYTES and os.access(TMPFS, os.W_OK | os.X_OK):
        os.environ["PYTEST_DEBUG_TEMPROOT"] = str(TMPFS)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto` (pyproject's addopts): one worker per core this process may run on. Every
    worker collects the whole suite (8 s of CPU, 15 s on a fresh clone, where it also
    rewrites every test module's asserts), and with tmp_path on a tmpfs and few tests left
    waiting on a process, a worker beyond the cores no longer earns that back: on 2 cores
    the fast tier from fresh clones took 171 s on 2 workers and 188 s on 3."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return cores or 1


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark `system` every test that uses a fixture of DAEMON_FIXTURES; skip `slow` ones
    (the nightly tier) unless NAVARCH_NIGHTLY=1."""
    nightly = os.environ.get("NAVARCH_NIGHTLY") == "1"
    for item in items:
        if not nightly and item.get_closest_marker("slow") is not None:
            item.add_marker(pytest.mark.skip(reason="nightly tier: set NAVARCH_NIGHTLY=1"))
        names = set(getattr(item, "fixturenames", ()))
        callspec = getattr(item, "callspec", None)
        if callspec is not None:
            names |= {v for v in callspec.params.values() if isinstance(v, str)}
        if names & DAEMON_FIXTURES:
            item.add_marker(pytest.mark.system)


def _utf8_safe(text: str) -> str:
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Captured output that holds lone surrogates (the hostile-text corpus logs them) made
    encodable: pytest-xdist sends each report to the controller as UTF-8."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    report.sections = [(name, _utf8_safe(text)) for name, text in report.sections]
