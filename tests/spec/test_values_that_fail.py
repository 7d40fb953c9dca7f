"""Values that once validated and then failed: a float count, a huge target, an alias bomb,
an empty secret file. Each is refused by `validate` with the file, line and key path."""

from __future__ import annotations

import resource
import subprocess
import sys
import textwrap
import time

import pytest

from navarch.errors import ConfigError
from navarch.fleet.load import fleet_problems, load_fleet
from tests.support.cli import run_navarch
from tests.support.fleet_text import BASE, write_fleet_text


@pytest.mark.parametrize(
    ("old", "new", "key_path"),
    [
        ("target: 2,", "target: 3.0,", "pools.train.nodes.target"),
        ("min: 1,", "min: 1.0,", "pools.train.nodes.min"),
        ("max: 3}", "max: 3.0}", "pools.train.nodes.max"),
        ("max: 3}\n", "max: 3}\n    health: {max_surge: 2.0}\n", "pools.train.health.max_surge"),
        (
            "max: 3}\n",
            "max: 3}\n    health: {unhealthy_after: 2.0}\n",
            "pools.train.health.unhealthy_after",
        ),
        (
            "max: 3}\n",
            "max: 3}\n    health: {return_requires_diag: 2.0}\n",
            "pools.train.health.return_requires_diag",
        ),
        ("max: 3}\n", "max: 3}\n    ssh: {parallel: 4.0}\n", "pools.train.ssh.parallel"),
        (
            "pools:",
            "safety: {repairs_per_pool_per_hour: 4.0}\npools:",
            "safety.repairs_per_pool_per_hour",
        ),
        ("pools:", "safety: {max_launches_per_run: 10.0}\npools:", "safety.max_launches_per_run"),
    ],
)
def test_a_float_count_is_refused_naming_its_key_path_and_line(tmp_path, old, new, key_path):
    text = BASE.replace(old, new)
    path = write_fleet_text(tmp_path, text)
    line = next(
        i for i, ln in enumerate(text.splitlines(), 1) if key_path.rsplit(".", 1)[-1] + ":" in ln
    )
    with pytest.raises(ConfigError) as err:
        load_fleet(path)
    assert (err.value.key_path, err.value.line, err.value.file) == (key_path, line, str(path))
    problems = fleet_problems(path)
    assert [p.key_path for p in problems] == [key_path]
    assert problems[0].line == line


def test_validate_refuses_target_3_0_instead_of_counting_5_0_nodes(tmp_path):
    path = write_fleet_text(tmp_path, BASE.replace("target: 2,", "target: 3.0,"))
    proc = run_navarch(["validate", str(path)], cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout
    assert f"{path}:9: pools.train.nodes.target: 3.0 is not a whole number" in proc.stderr
    assert "without a decimal point" in proc.stderr
    assert "Traceback" not in proc.stderr and "nodes at target" not in proc.stdout


@pytest.mark.parametrize("key", ["target", "max"])
def test_a_huge_target_is_refused_by_the_schema(tmp_path, key):
    path = write_fleet_text(
        tmp_path,
        BASE.replace("max: 3", "max: 100000000").replace(
            f"{key}: " + ("2" if key == "target" else "100000000"), f"{key}: 100000000"
        ),
    )
    problems = fleet_problems(path)
    assert f"pools.train.nodes.{key}" in [p.key_path for p in problems]
    assert all("maximum of 10000" in str(p) for p in problems)
    with pytest.raises(ConfigError, match="maximum of 10000"):
        load_fleet(path)


def test_ten_thousand_nodes_in_a_pool_is_still_valid(tmp_path):
    spec = load_fleet(
        write_fleet_text(tmp_path, BASE.replace("target: 2, max: 3", "target: 10000, max: 10000"))
    )
    assert spec.pool("train").target_nodes == 10000
    assert spec.safety.max_launches_per_run == 100  # the schema's default


BOMB = textwrap.dedent(
    """\
    fleet: demo
    providers:
      sim: {type: local}
    pools: {}
    laughs:
      a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]
      b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
      c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
      d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
      e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
      f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
      g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
      h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
      i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]
    """
)


def test_an_alias_bomb_is_refused_quickly_without_exhausting_memory(tmp_path):
    """A billion laughs (9**9 strings from 700 bytes) under a 1 GiB address-space limit:
    validate answers in seconds with the line of the alias that passed the bound."""
    path = write_fleet_text(tmp_path, BOMB)
    gib = 1 << 30

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (gib, gib))

    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "navarch", "validate", str(path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        preexec_fn=limit,
        timeout=60,
    )
    assert proc.returncode == 1, proc.stderr
    assert f"{path}:11: laughs.f[0]: expands to more than 100,000 YAML nodes" in proc.stderr
    assert "Traceback" not in proc.stderr and "MemoryError" not in proc.stderr
    assert time.monotonic() - started < 60
    with pytest.raises(ConfigError, match="expands to more than"):
        load_fleet(path)


def test_an_alias_used_a_few_times_still_loads(tmp_path):
    text = BASE.replace("zones: [sim-1a]", "zones: &zones [sim-1a]") + (
        "  infer:\n"
        "    provider: sim\n"
        "    instance_types: [sim-h100x8]\n"
        "    zones: *zones\n"
        "    nodes: {target: 1}\n"
    )
    spec = load_fleet(write_fleet_text(tmp_path, text))
    assert spec.pool("infer").placed()[0].zones == ("sim-1a",)


@pytest.mark.parametrize("content", ["", "  \n\n"])
def test_an_empty_secret_file_fails_validate(tmp_path, content):
    path = write_fleet_text(tmp_path, BASE + "secret: {file: fleet.secret}\n")
    (tmp_path / "fleet.secret").write_text(content)
    proc = run_navarch(["validate", str(path)], cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout
    assert (
        f"{path}:10: secret.file: fleet secret file {tmp_path / 'fleet.secret'} is empty"
        in proc.stderr
    )
    (tmp_path / "fleet.secret").write_text("0123456789abcdef\n")
    assert fleet_problems(path) == []
