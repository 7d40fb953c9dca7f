"""Runtime network health: a real H100 node's /sys/class/infiniband (gpud's testdata,
tests/fixtures/infiniband/README.md) read as healthy, and the same tree with one port down,
one at a lower rate, one flapping across agent runs, and counters rising too fast, read as
faults of class network; mlx5 kernel lines matched, and noise not.

Every run goes through the public path (navarch.agent.run_once) with an injected clock;
the trees the tests change are composed from the fixture, and each test says which file it
changed.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from navarch.agent import AgentConfig, load_config, run_once
from navarch.agent.bootstrap import BundleSource, render_cloud_init
from navarch.agent.network import (
    NetworkExpectation,
    expectation_for,
    match_mlx5,
    read_ports,
)
from navarch.errors import ConfigError
from navarch.fleet.load import load_fleet
from navarch.fleet.remedies import FaultClass, fault_class, is_hardware, row_for
from navarch.report.acceptance import AcceptancePolicy
from navarch.report.health import Remedy

REPO = Path(__file__).resolve().parents[2]
H100 = REPO / "tests" / "fixtures" / "infiniband" / "sys-class-infiniband-h100.0"
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
EXPECT_8X400 = {"ports": 8, "rate_gbps": 400.0}


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A writable copy of the H100 tree."""
    dest = tmp_path / "infiniband"
    shutil.copytree(H100, dest)
    return dest


def _set(tree: Path, port: str, name: str, text: str) -> None:
    device = port.split("/")[0]
    (tree / device / "ports" / "1" / name).write_text(text + "\n")


def _config(make_config: Callable[..., AgentConfig], tree: Path, **kw: Any) -> AgentConfig:
    network = kw.pop("network", NetworkExpectation(8, 400.0, "test"))
    return make_config(infiniband_dir=str(tree), network=network, **kw)


def _faults(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        c["fault_key"]["kind"]: c
        for c in report["checks"]
        if c.get("fault_key") and c["status"] != "healthy"
    }


def test_h100_tree_reads_as_eight_active_ndr_ports_and_a_roce_bond() -> None:
    ports = {p.name: p for p in read_ports(str(H100))}
    ib = [p for p in ports.values() if p.counted]
    assert len(ib) == 8 and all(p.up and p.rate_gbps == 400.0 for p in ib)
    bond = ports["mlx5_bond_0/1"]
    assert (bond.link_layer, bond.rate_gbps, bond.counted) == ("Ethernet", 200.0, False)
    assert ports["mlx5_1/1"].counters["link_downed"] == 255


def test_h100_node_with_its_eight_ndr_ports_reports_healthy(
    make_config: Callable[..., AgentConfig], validate_report: Any
) -> None:
    report = run_once(_config(make_config, H100), now=T0)
    validate_report(report)
    ib = next(c for c in report["checks"] if c["name"] == "ib_ports")
    assert ib["status"] == "healthy"
    assert ib["message"] == "8 of 8 expected ports active at 400 Gb/s"
    # mlx5_1's link_downed of 255 is a counter from before: a baseline, not a fault.
    assert report["status"] == "healthy" and not _faults(report)


def test_one_port_down_is_an_ib_port_down_fault_naming_the_port(
    make_config: Callable[..., AgentConfig], tree: Path
) -> None:
    _set(tree, "mlx5_4/1", "state", "1: DOWN")  # changed: state and phys_state of mlx5_4
    _set(tree, "mlx5_4/1", "phys_state", "3: Disabled")
    report = run_once(_config(make_config, tree), now=T0)
    fault = _faults(report)["ib_port_down"]
    assert (fault["status"], fault["action"]) == ("unhealthy", "reboot")
    assert "only 7 of 8 expected ports active" in fault["message"]
    assert "mlx5_4/1 DOWN/Disabled" in fault["message"]
    assert report["status"] == "unhealthy"


def test_one_port_at_a_lower_rate_is_an_ib_rate_fault(
    make_config: Callable[..., AgentConfig], tree: Path
) -> None:
    _set(tree, "mlx5_6/1", "rate", "200 Gb/sec (2X NDR)")  # changed: mlx5_6's rate
    report = run_once(_config(make_config, tree), now=T0)
    fault = _faults(report)["ib_rate"]
    assert (fault["status"], fault["action"]) == ("unhealthy", "reboot")
    assert "mlx5_6/1 at 200 Gb/s" in fault["message"]
    assert "ib_port_down" not in _faults(report)


def test_a_device_that_vanishes_between_runs_is_named_gone(
    make_config: Callable[..., AgentConfig], tree: Path
) -> None:
    cfg = _config(make_config, tree)
    run_once(cfg, now=T0)
    shutil.rmtree(tree / "mlx5_9")  # changed: mlx5_9 fell off the bus
    fault = _faults(run_once(cfg, now=T0 + timedelta(seconds=30)))["ib_port_down"]
    assert "mlx5_9/1 gone" in fault["message"]


def test_no_rdma_driver_at_all_is_doubt_not_a_fault(
    make_config: Callable[..., AgentConfig], tmp_path: Path
) -> None:
    report = run_once(_config(make_config, tmp_path / "absent"), now=T0)
    ib = next(c for c in report["checks"] if c["name"] == "ib_ports")
    assert (ib["status"], ib["action"], ib["fault_key"]) == ("unknown", "none", None)
    assert "RDMA driver is not loaded" in ib["message"]


def test_a_port_down_stays_reported_ten_minutes_after_it_came_back(
    make_config: Callable[..., AgentConfig], tree: Path
) -> None:
    cfg = _config(make_config, tree)
    _set(tree, "mlx5_4/1", "state", "1: DOWN")  # changed: mlx5_4 down, then back
    run_once(cfg, now=T0)
    _set(tree, "mlx5_4/1", "state", "4: ACTIVE")
    held = run_once(cfg, now=T0 + timedelta(minutes=9))
    assert "last seen 540s ago" in _faults(held)["ib_port_down"]["message"]
    assert not any(c["name"] == "ib_ports" and c["status"] == "healthy" for c in held["checks"])
    cleared = run_once(cfg, now=T0 + timedelta(minutes=11))
    assert not _faults(cleared) and cleared["status"] == "healthy"


def test_a_port_that_flips_down_and_up_three_times_is_a_link_flap(
    make_config: Callable[..., AgentConfig], tree: Path
) -> None:
    cfg = _config(make_config, tree, network=NetworkExpectation())  # flaps need no count
    t = T0
    seen: list[set[str]] = []
    for state in ["4: ACTIVE", "1: DOWN", "4: ACTIVE"] * 3:  # changed: mlx5_7's state
        _set(tree, "mlx5_7/1", "state", state)
        seen.append(set(_faults(run_once(cfg, now=t))))
        t += timedelta(seconds=30)
    assert all("ib_link_flap" not in s for s in seen[:-1])
    assert "ib_link_flap" in seen[-1]
    flap = _faults(run_once(cfg, now=t))["ib_link_flap"]
    assert (flap["status"], flap["action"]) == ("unhealthy", "reboot")
    assert "mlx5_7/1 3 times in 60 min" in flap["message"]
    # The flips leave the hour's window; the flap is held 10 minutes after its last sighting.
    last = T0 + timedelta(minutes=59)
    assert "ib_link_flap" in _faults(run_once(cfg, now=last))
    held = _faults(run_once(cfg, now=last + timedelta(minutes=6)))
    assert "last seen 360s ago" in held["ib_link_flap"]["message"]
    assert "ib_link_flap" not in _faults(run_once(cfg, now=last + timedelta(minutes=11)))


def test_link_downed_rising_three_between_two_runs_is_a_flap(
    make_config: Callable[..., AgentConfig], tree: Path
) -> None:
    cfg = _config(make_config, tree)
    run_once(cfg, now=T0)
    # changed: mlx5_1's link_downed 255 -> 258 while the port reads ACTIVE both times
    (tree / "mlx5_1" / "ports" / "1" / "counters" / "link_downed").write_text("258\n")
    report = run_once(cfg, now=T0 + timedelta(seconds=30))
    assert "mlx5_1/1 3 times" in _faults(report)["ib_link_flap"]["message"]


def test_symbol_errors_rising_past_the_bucket_are_a_degraded_counter_fault(
    make_config: Callable[..., AgentConfig], tree: Path
) -> None:
    cfg = _config(make_config, tree)
    counter = tree / "mlx5_5" / "ports" / "1" / "counters" / "symbol_error"  # changed
    run_once(cfg, now=T0)
    counter.write_text("90\n")  # within the burst of 100
    assert not _faults(run_once(cfg, now=T0 + timedelta(seconds=30)))
    counter.write_text("190\n")  # 100 more 30 s later: 40 tokens left
    report = run_once(cfg, now=T0 + timedelta(seconds=60))
    fault = _faults(report)["ib_counter:symbol_error"]
    assert (fault["status"], fault["action"]) == ("degraded", "none")
    assert "mlx5_5/1 +100 (90->190)" in fault["message"]
    # An hour later the bucket is full again: the same rise is within it.
    counter.write_text("280\n")
    assert not _faults(run_once(cfg, now=T0 + timedelta(hours=1)))


def _efa_tree(root: Path, retrans_pkts: int) -> Path:
    """A composed EFA device (efa_0): the files the EKS node monitoring agent and the efa
    driver name; state ACTIVE as EFA always reports (efa_query_port)."""
    base = root / "efa_0" / "ports" / "1"
    (base / "hw_counters").mkdir(parents=True, exist_ok=True)
    for name, text in {
        "state": "4: ACTIVE",
        "phys_state": "5: LinkUp",
        "rate": "100 Gb/sec (4X EDR)",
        "link_layer": "Unknown",
    }.items():
        (base / name).write_text(text + "\n")
    (base / "hw_counters" / "retrans_pkts").write_text(f"{retrans_pkts}\n")
    return root


def test_efa_retransmits_over_the_eks_agent_limit_are_an_efa_counter_fault(
    make_config: Callable[..., AgentConfig], tmp_path: Path
) -> None:
    root = _efa_tree(tmp_path / "efa", 0)
    cfg = _config(make_config, root, network=NetworkExpectation(1, None, "test"))
    run_once(cfg, now=T0)
    _efa_tree(root, 900)  # within the burst of 1,000
    assert not _faults(run_once(cfg, now=T0 + timedelta(seconds=30)))
    _efa_tree(root, 6000)
    fault = _faults(run_once(cfg, now=T0 + timedelta(seconds=60)))["efa_counter:retrans_pkts"]
    assert fault["status"] == "degraded" and "efa_0/1 +5100" in fault["message"]


# Kernel lines. Verbatim where a public log exists; composed ones follow the format string
# of the driver file named beside each matcher (navarch.agent.network.MLX5_MATCHERS).
MLX5_LINES = {
    # verbatim, as gpud's components/accelerator/nvidia/infiniband/kmsg_matcher.go quotes it
    "mlx5:pcie_power": "Feb 23 16:24:18 ny2g1r12hh2 kernel: mlx5_core 0000:5c:00.0: "
    "mlx5_pcie_event:299:(pid 268269): Detected insufficient power on the PCIe slot (27W).",
    # composed: gpud's quoted tail "mlx5_port_module_event:1131:(pid 0): Port module
    # event[error]: module 0, Cable error, High Temperature" behind the device prefix
    "mlx5:module_error": "[ 5000.123456] mlx5_core 0000:5c:00.0: mlx5_port_module_event:1131:"
    "(pid 0): Port module event[error]: module 0, Cable error, High Temperature",
    # composed: events.c "Port module event: module %u, %s\n" with "Cable unplugged"
    "mlx5:module_unplugged": "[ 5001.000000] mlx5_core 0000:5c:00.0: port_module:1129:(pid 0): "
    "Port module event: module 0, Cable unplugged",
    # composed: en_main.c netdev_info(priv->netdev, "Link down\n")
    "mlx5:link_down": "[ 5002.000000] mlx5_core 0000:0c:00.0 ens1f0np0: Link down",
}
NOISE = [
    "[ 5003.000000] mlx5_core 0000:0c:00.0 ens1f0np0: Link up",
    "[ 5004.000000] mlx5_core 0000:5c:00.0: mlx5_pcie_event:303:(pid 1): "
    "PCIe slot advertised sufficient power (75W).",
    "[ 5005.000000] mlx5_core 0000:5c:00.0: port_module:1129:(pid 0): "
    "Port module event: module 0, Cable plugged",
    "[ 5006.000000] audit: type=1123 audit(1700000000.000:1): pid=1 uid=0 msg='cmd=echo "
    "Port module event[error]: module 0, Cable error, High Temperature'",
    "Feb 23 16:24:19 host python3[4242]: Detected insufficient power on the PCIe slot (27W).",
    "[ 5007.000000] python3[4242]: segfault at 0 ip 0000 sp 0000 error 4 in libmlx5.so",
]


@pytest.mark.parametrize("kind", sorted(MLX5_LINES))
def test_mlx5_line_is_matched_to_its_fault_kind(kind: str) -> None:
    found = match_mlx5(MLX5_LINES[kind])
    assert found is not None and found.kind == kind


@pytest.mark.parametrize("line", NOISE)
def test_mlx5_noise_is_not_matched(line: str) -> None:
    assert match_mlx5(line) is None


def test_a_cable_error_line_is_reported_then_held_ten_minutes(
    make_config: Callable[..., AgentConfig], tmp_path: Path
) -> None:
    cfg = make_config(network=None)  # the fake backend reads no ports; kernel lines count
    Path(cfg.kernel_log or "").write_text(
        "\n".join([*NOISE, MLX5_LINES["mlx5:module_error"]]) + "\n"
    )
    report = run_once(cfg, now=T0)
    faults = _faults(report)
    assert set(faults) == {"mlx5:module_error"}
    assert (faults["mlx5:module_error"]["status"], faults["mlx5:module_error"]["action"]) == (
        "unhealthy",
        "replace",
    )
    assert "High Temperature" in faults["mlx5:module_error"]["message"]
    assert "mlx5:module_error" in _faults(run_once(cfg, now=T0 + timedelta(minutes=5)))
    assert not _faults(run_once(cfg, now=T0 + timedelta(minutes=11)))


def test_network_fault_kinds_are_class_network_with_one_in_place_try() -> None:
    kinds = [
        "ib_port_down",
        "ib_rate",
        "ib_link_flap",
        "ib_counter:symbol_error",
        "efa_counter:retrans_pkts",
        "mlx5:module_error",
    ]
    assert {fault_class(k) for k in kinds} == {FaultClass.NETWORK}
    row = row_for((), "ib_link_flap")
    assert row is not None and row.match == "network" and "gpud" in row.source
    assert not is_hardware(row, Remedy.REBOOT, 0)
    assert is_hardware(row, Remedy.REBOOT, 1)


def test_without_health_network_the_acceptance_baseline_is_expected(
    make_config: Callable[..., AgentConfig],
) -> None:
    policy = AcceptancePolicy(enabled=True, instance_type="Standard_ND96isr_H100_v5")
    got = expectation_for(make_config(acceptance=policy))
    assert (got.ports, got.rate_gbps) == (8, 400.0)
    assert "azurehpc-health-checks" in got.source
    assert expectation_for(make_config()).ports is None


def test_agent_yaml_network_is_read_and_a_bad_one_names_its_key(tmp_path: Path) -> None:
    base = {"fleet": "f", "pool": "p", "node": "n", "store": "file:///tmp/s"}
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump({**base, "network": EXPECT_8X400}))
    got = load_config(good).network
    assert got is not None and (got.ports, got.rate_gbps) == (8, 400.0)
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**base, "network": {"ports": "eight"}}))
    with pytest.raises(ConfigError, match="ports must be an integer") as err:
        load_config(bad)
    assert "network.ports" in str(err.value)


def test_a_pools_health_network_reaches_its_nodes_agent_yaml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NAVARCH_FLEET_SECRET", "0f" * 32)
    doc = yaml.safe_load((REPO / "fleet.aws.example.yaml").read_text())
    for pool in doc["pools"].values():
        pool.setdefault("health", {})["network"] = EXPECT_8X400
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(doc))
    spec = load_fleet(path)
    pool = spec.pools[0].name
    bundle = BundleSource("https://artifacts.example.com/navarch-agent.pyz", "ab" * 32)
    text = render_cloud_init(spec, pool, f"{pool}-0001", b"k" * 32, bundle=lambda: bundle)
    files = {f["path"]: f["content"] for f in yaml.safe_load(text)["write_files"]}
    agent = yaml.safe_load(next(v for k, v in files.items() if k.endswith("agent.yaml")))
    assert agent["network"] == EXPECT_8X400
