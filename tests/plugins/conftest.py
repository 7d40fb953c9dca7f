"""Fixtures for the extension points: the example plugin pip-installed for real into a
directory of its own, broken ones made discoverable through a dist-info directory written
here; either goes on a run's PYTHONPATH, where importlib.metadata finds it the way it finds
any installed package. A CLI run given that PYTHONPATH is a subprocess (run_navarch(...,
subprocess=True)): only a fresh interpreter reads it; a run in this process finds a plugin
put on sys.path (monkeypatch.syspath_prepend)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "plugins" / "navarch-baremetal"


@pytest.fixture(scope="session")
def baremetal_installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """examples/plugins/navarch-baremetal pip-installed (no deps, no build isolation, no
    index: nothing is fetched) into a directory of its own -> that directory, for a run's
    PYTHONPATH. pip builds the wheel from the example's own pyproject.toml, so the entry
    point a run finds is the one the example declares; this interpreter's site-packages is
    left as it was."""
    work = tmp_path_factory.mktemp("baremetal")
    # A copy: the wheel build writes build/ and egg-info beside the sources, not in the checkout.
    source = shutil.copytree(
        EXAMPLE,
        work / "source",
        ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"),
    )
    site = work / "site"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", "install"]
        + ["-q", "--no-deps", "--no-build-isolation", "--no-index", "--target", str(site)]
        + [str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return site


def fake_distribution(site: Path, name: str, entry_points: str, modules: dict[str, str]) -> Path:
    """Write a minimal installed distribution under site (METADATA, entry_points.txt and
    the modules' source), to be put on PYTHONPATH. Returns site."""
    info = site / f"{name.replace('-', '_')}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(entry_points)
    for module, source in modules.items():
        (site / f"{module}.py").write_text(source)
    return site
