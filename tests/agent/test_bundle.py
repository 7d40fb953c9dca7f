"""The agent bundle: one reproducible zipapp that runs the agent with nothing installed,
on every Python from 3.9 to 3.13 found on PATH, with only pure-Python code inside."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from datetime import datetime
from pathlib import Path

import pytest

from navarch import __version__
from navarch.agent.bundle import VENDORED, build_bundle
from navarch.agent.store import AwsCredentials, sigv4_headers
from navarch.report.compat import UTC
from tests.support.cli import run_navarch
from tests.support.fake_agent import write_agent_yaml

#: The issue's budget for the file a node downloads.
MAX_BUNDLE_BYTES = 25 * 1024 * 1024
SUPPORTED = ("3.9", "3.10", "3.11", "3.12", "3.13")


def interpreters() -> list[str]:
    """python3.X of every supported version on PATH or under $PYENV_ROOT/versions, and
    always this one."""
    found = {f"{sys.version_info.major}.{sys.version_info.minor}": sys.executable}
    pyenv = Path(os.environ.get("PYENV_ROOT", "~/.pyenv")).expanduser() / "versions"
    for version in SUPPORTED:
        candidates = sorted(pyenv.glob(f"{version}.*/bin/python{version}"))
        path = str(candidates[-1]) if candidates else shutil.which(f"python{version}")
        if path and version not in found:
            real = subprocess.run(
                [path, "-c", "import sys; print(sys.executable)"],
                capture_output=True,
                text=True,
                timeout=30,
            )
            if real.returncode == 0:  # a version manager's shim names one it lacks
                found[version] = real.stdout.strip()
    return [found[v] for v in sorted(found, key=lambda v: tuple(map(int, v.split("."))))]


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_two_builds_are_byte_identical_and_named_by_their_hash(bundle_file: Path) -> None:
    a = build_bundle()  # a second build: bundle_file is the session's first
    assert a.data == bundle_file.read_bytes() and a.sha256 == sha256_of(bundle_file)
    assert a.key == f"agent/{__version__}-{a.sha256}.pyz"


def test_bundle_holds_pure_python_only_and_no_cloud_sdk(bundle_file: Path) -> None:
    names = zipfile.ZipFile(bundle_file).namelist()
    assert "__main__.py" in names
    assert not [n for n in names if n.endswith((".so", ".pyd", ".dylib"))]
    tops = {n.split("/")[0].removesuffix(".py") for n in names}
    assert tops == {"__main__", "navarch", *VENDORED}
    for heavy in (
        "navarch/fleet/spec.py",
        "navarch/planner/plan.py",
        "navarch/stores/s3.py",
        "navarch/reconcile/run.py",
        "navarch/agent/bundle.py",
    ):
        assert heavy not in names
    assert bundle_file.stat().st_size < MAX_BUNDLE_BYTES


@pytest.mark.parametrize("python", interpreters())
def test_bundle_runs_isolated_on_every_supported_python(
    python: str, bundle_file: Path, tmp_path: Path
) -> None:
    config = write_agent_yaml(tmp_path, gpus_per_node=4)
    run = subprocess.run(
        [python, "-I", "-S", str(bundle_file), "run", "--once", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "NAVARCH_GPU_COUNT": "4"},
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads((tmp_path / "store/health/demo/train/train-0001.json").read_text())
    assert report["status"] == "healthy" and len(report["gpus"]) == 4
    assert report["agent_version"] == __version__


def test_bundle_offers_only_what_runs_without_a_full_install(
    bundle_file: Path, tmp_path: Path
) -> None:
    """install needs the unit templates (jinja2) and bundle this installation's sources:
    the bundle refuses both at the argument parser, and its help says where units come from."""
    for command in ("install", "bundle"):
        run = subprocess.run(
            [sys.executable, "-I", "-S", str(bundle_file), command],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
        )
        assert run.returncode == 2, run.stdout + run.stderr
        assert "invalid choice" in run.stderr and "Traceback" not in run.stderr, run.stderr
    helped = subprocess.run(
        [sys.executable, "-I", "-S", str(bundle_file), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert "cloud-init, examples/image" in " ".join(helped.stdout.split()), helped.stdout


def test_bundle_takes_the_command_words_typed_on_a_full_install(
    bundle_file: Path, tmp_path: Path
) -> None:
    """`navarch agent run --once --stdout` (docs/runbook.md) reaches the bundle as argv
    `agent run ...` through the node's `navarch` command: it runs as `run ...` does."""
    run = subprocess.run(
        [sys.executable, "-I", "-S", str(bundle_file), "agent", "run", "--once", "--stdout"]
        + ["--config", str(write_agent_yaml(tmp_path, gpus_per_node=4))],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "NAVARCH_GPU_COUNT": "4"},
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert json.loads(run.stdout)["node"] == "train-0001"


def _old_pythons() -> list[str]:
    """python3.6 to 3.8 on PATH or under $PYENV_ROOT/versions (none is needed: the guard is
    also run under a faked sys.version_info)."""
    pyenv = Path(os.environ.get("PYENV_ROOT", "~/.pyenv")).expanduser() / "versions"
    found = []
    for version in ("3.6", "3.7", "3.8"):
        candidates = sorted(pyenv.glob(f"{version}.*/bin/python{version}"))
        path = str(candidates[-1]) if candidates else shutil.which(f"python{version}")
        if path:
            found.append(path)
    return found


def test_the_bundle_on_python_3_8_says_in_one_line_which_python_it_needs(
    bundle_file: Path, tmp_path: Path
) -> None:
    faked = subprocess.run(
        [
            sys.executable,
            "-I",
            "-S",
            "-c",
            "import sys; sys.version_info = (3, 8, 18, 'final', 0); bundle = sys.argv[1]; "
            "sys.path.insert(0, bundle); import runpy; runpy.run_path(bundle, run_name='__main__')",
            str(bundle_file),
            "run",
            "--once",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    runs = [faked] + [
        subprocess.run(
            [python, "-I", "-S", str(bundle_file), "run", "--once"],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
        )
        for python in _old_pythons()
    ]
    for run in runs:
        assert run.returncode == 1, run.stdout + run.stderr
        (line,) = run.stderr.splitlines()
        assert line.startswith("navarch: the agent bundle needs Python 3.9 or newer;"), line


def test_bundle_modules_keep_to_python_3_9(bundle_file: Path, tmp_path: Path) -> None:
    pytest.importorskip("vermin", reason="vermin is a dev dependency (pip install -e .[dev])")
    src = tmp_path / "src"
    zipfile.ZipFile(bundle_file).extractall(src)
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, vermin; sys.exit(vermin.main())",
            "-t=3.9-",
            "--violations",
            "--no-tips",
            "--eval-annotations=no",
            # The suite's workers already keep every core busy: a pool only adds its start.
            "--processes=1",
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr


def test_cli_writes_the_bundle(bundle_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "agent.pyz"
    run = run_navarch(["agent", "bundle", "--out", str(out)], cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert f"sha256 {sha256_of(bundle_file)}" in run.stdout
    assert out.read_bytes() == bundle_file.read_bytes() and out.stat().st_mode & 0o111


def test_s3_signature_matches_botocore(monkeypatch: pytest.MonkeyPatch) -> None:
    botocore_auth = pytest.importorskip("botocore.auth")
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    url = "https://bucket.s3.us-east-1.amazonaws.com/p/health/demo/train/n%201.json?x-id=PutObject"
    body = b'{"a":1}'
    ours = sigv4_headers(
        "PUT",
        url,
        {"Content-Type": "application/json"},
        body,
        AwsCredentials("AKID", "SECRET", "TOKEN"),
        "us-east-1",
        now,
    )
    req = AWSRequest(
        method="PUT",
        url=url,
        data=body,
        headers={
            "Content-Type": "application/json",
            "X-Amz-Content-Sha256": ours["X-Amz-Content-Sha256"],
        },
    )
    signer = botocore_auth.S3SigV4Auth(Credentials("AKID", "SECRET", "TOKEN"), "s3", "us-east-1")
    monkeypatch.setattr(botocore_auth, "get_current_datetime", lambda: now.replace(tzinfo=None))
    signer.add_auth(req)
    assert ours["Authorization"] == req.headers["Authorization"]


def test_with_a_cache_dir_the_bundle_unpacks_once_and_python_caches_bytecode(
    bundle_file: Path, tmp_path: Path
) -> None:
    config = write_agent_yaml(tmp_path, gpus_per_node=4)
    cache = tmp_path / "cache"
    stale = cache / "0123456789abcdef"  # an earlier bundle's tree
    stale.mkdir(parents=True)
    for _ in range(2):
        run = subprocess.run(
            [
                sys.executable,
                "-I",
                "-S",
                str(bundle_file),
                "run",
                "--once",
                "--config",
                str(config),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            env={"NAVARCH_BUNDLE_CACHE": str(cache)},
        )
        assert run.returncode == 0, run.stdout + run.stderr
    (tree,) = cache.iterdir()
    assert tree.name == sha256_of(bundle_file)[:16]
    assert list((tree / "navarch/agent/__pycache__").glob("runner.*.pyc"))


def test_an_unwritable_cache_falls_back_to_the_zip(bundle_file: Path, tmp_path: Path) -> None:
    config = write_agent_yaml(tmp_path, gpus_per_node=4)
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    run = subprocess.run(
        [sys.executable, "-I", "-S", str(bundle_file), "run", "--once", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"NAVARCH_BUNDLE_CACHE": str(blocker / "cache")},
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "running from the zip" in run.stderr
