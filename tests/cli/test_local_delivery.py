"""The agent install path on the embedded local provider, as README's walk-through shows
it: `navarch render cloud-init` publishes the bundle to the file:// store and renders the
user-data with a file:// URL; the user-data, run in a scratch root, installs it; the agent
runs once under `python3 -I -S` on fake GPUs and the next plan counts its report."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest

from navarch import __version__
from tests.support.userdata import bundle_source, run_installed_agent, run_user_data


def _applied_user_data(navarch) -> tuple[str, Path]:  # noqa: ANN001
    """The train pool's user-data after an apply, and the bundle file its file:// URL names."""
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    user_data = navarch.ok(
        "render", "cloud-init", "fleet.yaml", "--pool", "train", "--reveal-key"
    ).out
    url = bundle_source(user_data).url
    assert url.startswith("file:///")
    return user_data, Path(url[len("file://") :])


def test_rendered_user_data_installs_the_bundle_from_the_file_store(
    navarch, fleet_dir: Path, tmp_path: Path
) -> None:
    user_data, published = _applied_user_data(navarch)
    source = bundle_source(user_data)
    assert published.name == f"{__version__}-{source.sha256}.pyz"
    assert hashlib.sha256(published.read_bytes()).hexdigest() == source.sha256

    root = tmp_path / "node-root"
    installed = run_user_data(user_data, root)
    assert installed.files == (
        "/etc/navarch/agent.yaml",
        "/etc/systemd/system/navarch-agent.service",
        "/etc/systemd/system/navarch-agent.timer",
        "/usr/local/bin/navarch",
    )
    run = run_installed_agent(installed, {"NAVARCH_FAKE_GPU": "true"})
    assert run.returncode == 0, run.stdout + run.stderr

    views = {n["node"]: n["lifecycle"] for n in navarch.nodes("train")}
    assert views["demo-train-0001"] == "healthy"
    assert views["demo-train-0002"] != "healthy"  # no agent ran there (no `local tick`)


def test_a_bundle_that_cannot_be_downloaded_is_said_so_not_called_a_checksum_mismatch(
    navarch, fleet_dir: Path, tmp_path: Path
) -> None:
    user_data, published = _applied_user_data(navarch)
    published.unlink()
    with pytest.raises(subprocess.CalledProcessError) as err:
        run_user_data(user_data, tmp_path / "node-root")
    assert "navarch: cannot download the agent bundle (5 attempts" in err.value.stderr
    assert "sha256 is not" not in err.value.stderr
    assert not list((tmp_path / "node-root").rglob("*.part"))  # no half-downloaded bundle
