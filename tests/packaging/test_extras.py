"""`pip install navarch` without extras: the main job runs on the local provider, and a
feature whose extra is missing fails with one line naming the extra."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXTRA_MODULES = (
    "boto3",
    "botocore",
    "google",
    "azure",
    "fabric",
    "paramiko",
    "invoke",
    "matplotlib",
    "mcp",
    "mcp_types",
)

# Runs navarch with the extras' packages unimportable, as in an install without extras.
_WITHOUT_EXTRAS = f"""
import sys
from importlib.abc import MetaPathFinder

class NotInstalled(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {EXTRA_MODULES!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, NotInstalled())
from navarch.cli import main
sys.exit(main(sys.argv[1:]))
"""


def navarch_without_extras(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "NAVARCH_FLEET_SECRET": "ab" * 32}
    return subprocess.run(
        [sys.executable, "-c", _WITHOUT_EXTRAS, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_main_job_runs_on_the_local_provider_without_extras(tmp_path: Path) -> None:
    shutil.copy(REPO / "fleet.example.yaml", tmp_path / "fleet.yaml")
    run = navarch_without_extras(tmp_path, "apply", "fleet.yaml", "--auto-approve")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Apply complete" in run.stdout


@pytest.mark.parametrize(
    ("fleet", "extra"),
    [
        ("fleet.aws.example.yaml", "aws"),
        ("fleet.gcp.example.yaml", "gcp"),
        ("fleet.azure.example.yaml", "azure"),
    ],
)
def test_a_cloud_fleet_without_its_extra_names_the_extra(
    tmp_path: Path, fleet: str, extra: str
) -> None:
    run = navarch_without_extras(tmp_path, "plan", str(REPO / fleet))
    assert run.returncode == 1
    assert f"pip install 'navarch[{extra}]'" in run.stderr
    assert "Traceback" not in run.stderr


def test_navarch_mcp_without_its_extra_names_the_extra(tmp_path: Path) -> None:
    shutil.copy(REPO / "fleet.example.yaml", tmp_path / "fleet.yaml")
    run = navarch_without_extras(tmp_path, "mcp", "fleet.yaml")
    assert run.returncode == 1
    assert run.stderr.strip().splitlines() == [
        "Error: navarch mcp needs navarch[mcp] (mcp is not installed) (pip install 'navarch[mcp]')"
    ]
