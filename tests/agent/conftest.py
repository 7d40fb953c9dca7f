"""Fixtures for the agent tests: configs, a real file:// store, the report schema, a fake
NVML world for unittest.mock.patch.multiple(pynvml, ...), and metadata servers on 127.0.0.1."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from unittest.mock import patch

import jsonschema
import pynvml
import pytest

from navarch.agent import AgentConfig, run_once
from navarch.agent.bundle import write_bundle
from navarch.resources import schema_path
from navarch.stores import open_store
from tests.support.agent import T0, agent_config


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("NAVARCH_FAKE_GPU", "NAVARCH_GPU_COUNT", "NAVARCH_FAKE_GPU_FAULTS"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(autouse=True)
def _test_machine_is_not_the_node(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A real-backend run reads a synchronised clock and a sysfs without AER errors: the
    test machine's own clock and PCIe are not the node under test."""
    from navarch.agent import host, host_readings

    sysfs = tmp_path / "machine-sysfs"
    (sysfs / "bus" / "pci" / "devices").mkdir(parents=True)
    monkeypatch.setattr(host, "DEFAULT_SYSFS_ROOT", str(sysfs))
    monkeypatch.setattr(host_readings, "libc_adjtimex", lambda: (0, 0))


@pytest.fixture(scope="session")
def bundle_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The agent bundle (navarch-agent.pyz), built once: every build of a source tree is
    byte-identical (test_bundle.py), so each test that runs or installs it needs no build
    of its own. Read it; copy it to change it."""
    out = tmp_path_factory.mktemp("bundle") / "navarch-agent.pyz"
    write_bundle(out)
    return out


@pytest.fixture
def validate_report() -> Callable[[dict[str, Any]], None]:
    schema = json.loads(schema_path("health-report.schema.json").read_text())
    validator = jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    return validator.validate


@pytest.fixture
def make_config(tmp_path: Path) -> Callable[..., AgentConfig]:
    """tests.support.agent.agent_config under this test's tmp_path."""

    def make(**kw: Any) -> AgentConfig:
        return agent_config(tmp_path, **kw)

    return make


@pytest.fixture
def run(nvml_world: NvmlWorld, make_config: Callable[..., AgentConfig]) -> Callable[..., Any]:
    """run_once on the fake NVML world (pynvml patched) at now (T0 unless given): the
    config is make_config's on the NVML backend with the world's GPU count unless kw say
    otherwise; fabric_manager goes to run_once -> the report."""

    def go(now: datetime = T0, fabric_manager: Any = None, **kw: Any) -> dict[str, Any]:
        kw.setdefault("gpus_per_node", nvml_world.count)
        cfg = make_config(fake_gpu=False, **kw)
        with patch.multiple(pynvml, **nvml_world.functions()):
            return run_once(cfg, now=now, fabric_manager=fabric_manager)

    return go


@pytest.fixture
def read_stored(tmp_path: Path) -> Callable[[AgentConfig], dict[str, Any]]:
    def read(cfg: AgentConfig) -> dict[str, Any]:
        return json.loads(open_store(cfg.store).get(cfg.report_key).data)

    return read


# --- a fake NVML world for patch.multiple ----------------------------------------------


def nvml_error(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


class NvmlWorld:
    """Per-GPU values for each patched pynvml function; healthy H100 defaults.

    set(fn, gpu, value) overrides one reading; a BaseException value is raised instead.
    Handles are the GPU indices.
    """

    def __init__(self, count: int = 2) -> None:
        self.count = count
        self.over: dict[tuple[str, int], Any] = {}
        self.init_error: BaseException | None = None
        self.init_blocks_on: threading.Event | None = None  # nvmlInit waits on it (a hang)
        self.count_error: BaseException | None = None
        self.handle_errors: dict[int, BaseException] = {}
        self.nvlink_links = 4
        self.nvlink_counters: dict[tuple[int, int], int] = {}
        self.replays: dict[int, int] = {}

    def set(self, fn: str, gpu: int, value: Any) -> NvmlWorld:
        self.over[(fn, gpu)] = value
        return self

    def _v(self, fn: str, h: int, default: Any) -> Any:
        v = self.over.get((fn, h), default)
        if isinstance(v, BaseException):
            raise v
        return v() if callable(v) else v

    def functions(self) -> dict[str, Any]:
        N = pynvml
        w = self

        def init() -> None:
            if w.init_blocks_on is not None:
                w.init_blocks_on.wait()
            if w.init_error is not None:
                raise w.init_error

        def count() -> int:
            if w.count_error is not None:
                raise w.count_error
            return w.count

        def handle(i: int) -> int:
            if i in w.handle_errors:
                raise w.handle_errors[i]
            return i

        class Pci:
            def __init__(self, h: int) -> None:
                self.busId = f"00000000:{0x18 + h * 0x10:02X}:00.0"

        class Mem:
            total = 81559 * 1024 * 1024
            used = 512 * 1024 * 1024

        class Util:
            gpu = 40
            memory = 10

        def threshold(h: int, which: int) -> int:
            default = {
                N.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN: 89,
                N.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN: 92,
                N.NVML_TEMPERATURE_THRESHOLD_GPU_MAX: 87,
            }[which]
            return w._v(f"threshold:{which}", h, default)

        def ecc(h: int, etype: int, counter: int) -> int:
            name = "ecc_unc" if etype == N.NVML_MEMORY_ERROR_TYPE_UNCORRECTED else "ecc_corr"
            return w._v(name, h, 0)

        def fields(h: int, ids: list[int]) -> Any:
            arr = (N.c_nvmlFieldValue_t * len(ids))()
            for n, fid in enumerate(ids):
                arr[n].fieldId = fid
                val = w.over.get(("field", h), 0)
                if isinstance(val, tuple):  # ("ret", code)
                    arr[n].nvmlReturn = val[1]
                else:
                    arr[n].nvmlReturn = 0
                    arr[n].valueType = N.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
                    arr[n].value.ullVal = int(val)
            return arr

        def nvlink_state(h: int, link: int) -> int:
            if link >= w.nvlink_links:
                raise nvml_error(N.NVML_ERROR_INVALID_ARGUMENT)
            return w._v(f"nvlink_state:{link}", h, 1)

        def nvlink_counter(h: int, link: int, counter: int) -> int:
            return w._v(
                "nvlink_counter",
                h,
                lambda: w.nvlink_counters.get((h, counter), 0) if link == 0 else 0,
            )

        def fabric(h: int, info: Any) -> int:
            """v2 fabric info; default: no NVSwitch fabric (state not supported)."""
            state, status, mask = w._v("fabric", h, (N.NVML_GPU_FABRIC_STATE_NOT_SUPPORTED, 0, 0))
            info.state, info.status, info.healthMask, info.cliqueId = state, status, mask, 0
            return 0

        return {
            "nvmlInit": init,
            "nvmlShutdown": lambda: None,
            "nvmlSystemGetDriverVersion": lambda: "570.133.20",
            "nvmlDeviceGetCount": count,
            "nvmlDeviceGetHandleByIndex": handle,
            "nvmlDeviceGetUUID": lambda h: w._v(
                "uuid", h, f"GPU-0000000{h}-aaaa-bbbb-cccc-dddddddddddd"
            ),
            "nvmlDeviceGetName": lambda h: w._v("name", h, "NVIDIA H100 80GB HBM3"),
            "nvmlDeviceGetPciInfo_v3": lambda h: w._v("pci", h, Pci(h)),
            "nvmlDeviceGetTemperature": lambda h, s: w._v("temperature", h, 41),
            "nvmlDeviceGetTemperatureThreshold": threshold,
            "nvmlDeviceGetPowerUsage": lambda h: w._v("power", h, 95_000),
            "nvmlDeviceGetEnforcedPowerLimit": lambda h: w._v("power_limit", h, 700_000),
            "nvmlDeviceGetPowerManagementDefaultLimit": lambda h: w._v("power_default", h, 700_000),
            "nvmlDeviceGetMemoryInfo": lambda h: w._v("memory", h, Mem()),
            "nvmlDeviceGetUtilizationRates": lambda h: w._v("util", h, Util()),
            "nvmlDeviceGetComputeRunningProcesses": lambda h: w._v("procs", h, []),
            "nvmlDeviceGetTotalEccErrors": ecc,
            "nvmlDeviceGetRemappedRows": lambda h: w._v("remapped", h, (0, 0, 0, 0)),
            "nvmlDeviceGetRetiredPages": lambda h, cause: w._v(f"retired:{cause}", h, []),
            "nvmlDeviceGetRetiredPagesPendingStatus": lambda h: w._v("retired_pending", h, 0),
            "nvmlDeviceGetFieldValues": fields,
            "nvmlDeviceGetCurrentClocksEventReasons": lambda h: w._v("clocks", h, 0),
            "nvmlDeviceGetCurrentClocksThrottleReasons": lambda h: w._v("clocks_old", h, 0),
            "nvmlDeviceGetCurrPcieLinkWidth": lambda h: w._v("pcie_width", h, 16),
            "nvmlDeviceGetMaxPcieLinkWidth": lambda h: w._v("pcie_width_max", h, 16),
            "nvmlDeviceGetMaxPcieLinkGeneration": lambda h: w._v("pcie_gen_max", h, 5),
            "nvmlDeviceGetPcieReplayCounter": lambda h: w._v(
                "replay", h, lambda: w.replays.get(h, 0)
            ),
            "nvmlDeviceGetNvLinkState": nvlink_state,
            "nvmlDeviceGetNvLinkErrorCounter": nvlink_counter,
            "nvmlDeviceGetPersistenceMode": lambda h: w._v(
                "persistence", h, N.NVML_FEATURE_ENABLED
            ),
            "nvmlDeviceValidateInforom": lambda h: w._v("inforom", h, None),
            "nvmlDeviceGetEccMode": lambda h: w._v("ecc_mode", h, [1, 1]),
            "nvmlDeviceGetSerial": lambda h: w._v("serial", h, f"165000000000{h}"),
            "nvmlDeviceGetMigMode": lambda h: w._v("mig", h, [0, 0]),
            "nvmlDeviceGetGpuFabricInfoV": fabric,
        }


@pytest.fixture
def nvml_world() -> NvmlWorld:
    return NvmlWorld()


# --- metadata servers -------------------------------------------------------------------


class MetadataServer:
    """A stdlib HTTP server on 127.0.0.1 that speaks AWS, GCP and Azure metadata paths.

    routes: (method, path) -> (status, body, required headers); requests are recorded.
    """

    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], tuple[int, str, dict[str, str]]] = {}
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self, method: str) -> None:
                server.requests.append((method, self.path, dict(self.headers)))
                route = server.routes.get((method, self.path))
                if route is None:
                    self.send_response(404)
                    self.end_headers()
                    return
                status, body, needed = route
                if any(self.headers.get(k) != v for k, v in needed.items()):
                    status, body = 401, "missing header"
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802
                self._serve("GET")

            def do_PUT(self) -> None:  # noqa: N802
                self._serve("PUT")

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()

    def route(
        self, method: str, path: str, status: int, body: str, headers: dict[str, str] | None = None
    ) -> None:
        self.routes[(method, path)] = (status, body, headers or {})

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def metadata_server() -> Iterator[MetadataServer]:
    srv = MetadataServer()
    try:
        yield srv
    finally:
        srv.close()
