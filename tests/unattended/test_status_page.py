"""The status page without a server, rendered in a real headless
Chromium (Debian's `chromium`): the DOM holds the node table, the screenshot is a real,
non-blank PNG. Also: `status_page: true` makes apply write status/<fleet>/index.html."""

from __future__ import annotations

import re
import struct
import subprocess
import zlib
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.support.cli import run_navarch
from tests.support.system import require_system_package
from tests.unattended.helpers import write_fleet

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
NODES = [
    "demo-train-0001",
    "demo-train-0002",
    "demo-train-0003",
    "demo-infer-0001",
    "demo-infer-0002",
]


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    require_system_package("chromium", "chromium")
    return subprocess.run(
        ["chromium", *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'ud'}", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


class Tables(HTMLParser):
    """Rows (lists of cell texts) of every <table class="nodes"> in a DOM."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self._in_nodes = False
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table" and ("class", "nodes") in attrs:
            self._in_nodes = True
        elif self._in_nodes and tag == "tr":
            self.rows.append([])
        elif self._in_nodes and tag == "td":
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self._in_nodes = False
        elif tag == "td" and self._cell is not None:
            self.rows[-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def png_pixels(path: Path) -> tuple[int, int, bytes]:
    """(width, height, decompressed scanlines) of a PNG, with the stdlib only."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, width, height = 8, b"", 0, 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        chunk = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height = struct.unpack(">II", chunk[:8])
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    return width, height, zlib.decompress(idat)


@pytest.fixture
def healthy_fleet(tmp_path: Path) -> Path:
    write_fleet(tmp_path, status_page=True)
    for args in (
        ["apply", "fleet.yaml", "--auto-approve"],
        ["local", "tick", "fleet.yaml"],
        ["apply", "fleet.yaml", "--auto-approve"],
    ):
        run = run_navarch(args, cwd=tmp_path)
        assert run.returncode == 0, run.stdout + run.stderr
    return tmp_path


def test_apply_publishes_the_status_page_to_the_store(healthy_fleet: Path) -> None:
    page = (healthy_fleet / ".navarch/store/status/demo/index.html").read_text()
    assert '<meta name="viewport"' in page and "<script" not in page
    for node in NODES:
        assert node in page
    assert "provision" in page  # recent events from the audit log


@pytest.mark.system
def test_status_html_renders_in_headless_chromium(healthy_fleet: Path, tmp_path: Path) -> None:
    run = run_navarch(["status", "fleet.yaml", "--html", "status.html"], cwd=healthy_fleet)
    assert run.returncode == 0, run.stderr
    url = (healthy_fleet / "status.html").resolve().as_uri()
    dom = chromium(tmp_path, "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr
    tables = Tables()
    tables.feed(dom.stdout)
    rows = [r for r in tables.rows if r]
    assert sorted(r[0] for r in rows) == sorted(NODES)
    assert all(r[1] == "healthy" and r[2] == "healthy" for r in rows), rows
    assert re.search(r"<h1>Fleet demo</h1>", dom.stdout)

    shot = tmp_path / "phone.png"
    res = chromium(
        tmp_path, "--window-size=412,915", f"--screenshot={shot}", "--hide-scrollbars", url
    )
    assert res.returncode == 0 and shot.exists(), res.stderr
    width, height, raw = png_pixels(shot)
    assert (width, height) == (412, 915)
    stride = len(raw) // height
    rows_px = [raw[i * stride + 1 : (i + 1) * stride] for i in range(height)]
    assert len(set(raw)) > 16, "the screenshot is blank"
    assert len(set(rows_px)) > height // 4, "the screenshot has almost no content"
