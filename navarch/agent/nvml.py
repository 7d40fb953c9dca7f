"""NVML backend (nvidia-ml-py, module ``pynvml``): read every GPU into GpuSnapshot.

``classify_nvml_error`` is the ONE place where pynvml's ``NVMLError_*`` exceptions become
navarch's ``ProbeErrorKind`` (gpu-health.md §4): every other function of the agent sees
only the classified kinds.

Per-call policy (gpud pattern): NotSupported / FunctionNotFound -> the metric is listed in
``not_supported`` and skipped, never a fault; GpuIsLost / ResetRequired from ANY call ->
the GPU is marked lost / reset-required and not read further; any other NVMLError -> the
metric is listed in ``unreadable`` with the library's text.

Every NVML call runs under a deadline (navarch.agent.deadline.DeadlineCaller, through
``_Guarded``): a call that does not return ends the probe with ``GpuProbe.hung`` naming
the call and the GPU it was reading; the GPUs after it are not read and ``nvmlShutdown``
is not called (it would wait on the same stuck driver lock).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from navarch.agent.deadline import (
    DEFAULT_BUDGET_S,
    DEFAULT_CALL_TIMEOUT_S,
    CallHung,
    DeadlineCaller,
)
from navarch.agent.gpu import (
    FabricInfo,
    GpuProbe,
    GpuSnapshot,
    HungCall,
    ProbeError,
    ProbeErrorKind,
)
from navarch.agent.kernel_log import normalise_bdf

__all__ = ["NvmlGpuBackend", "classify_nvml_error", "NVML_ERROR_KINDS"]

#: NVML_ERROR_* value -> navarch kind. Codes not listed are OTHER.
NVML_ERROR_KINDS: dict[int, ProbeErrorKind] = {
    3: ProbeErrorKind.NOT_SUPPORTED,  # NVML_ERROR_NOT_SUPPORTED
    4: ProbeErrorKind.NO_PERMISSION,  # NVML_ERROR_NO_PERMISSION
    9: ProbeErrorKind.DRIVER_NOT_LOADED,  # NVML_ERROR_DRIVER_NOT_LOADED
    12: ProbeErrorKind.LIBRARY_NOT_FOUND,  # NVML_ERROR_LIBRARY_NOT_FOUND
    13: ProbeErrorKind.FUNCTION_NOT_FOUND,  # NVML_ERROR_FUNCTION_NOT_FOUND
    14: ProbeErrorKind.CORRUPTED_INFOROM,  # NVML_ERROR_CORRUPTED_INFOROM
    15: ProbeErrorKind.GPU_LOST,  # NVML_ERROR_GPU_IS_LOST
    16: ProbeErrorKind.RESET_REQUIRED,  # NVML_ERROR_RESET_REQUIRED
    18: ProbeErrorKind.LIB_RM_VERSION_MISMATCH,  # NVML_ERROR_LIB_RM_VERSION_MISMATCH
}


def classify_nvml_error(exc: BaseException) -> ProbeError:
    """Translate a pynvml exception (or OSError from loading the library) to a ProbeError.

    pynvml raises ``NVMLError_<Name>`` subclasses of ``pynvml.NVMLError`` carrying the
    NVML return code in ``.value`` (nvidia-ml-py 12/13); ``str(exc)`` is NVML's text.
    """
    code = getattr(exc, "value", None)
    if isinstance(exc, OSError) and not isinstance(code, int):
        return ProbeError(ProbeErrorKind.LIBRARY_NOT_FOUND, str(exc), None)
    kind = (
        NVML_ERROR_KINDS.get(code, ProbeErrorKind.OTHER)
        if isinstance(code, int)
        else ProbeErrorKind.OTHER
    )
    try:
        text = str(exc)
    except Exception:  # pynvml's __str__ calls into the library; never let it escape
        text = f"NVML error {code}"
    return ProbeError(kind, text, code if isinstance(code, int) else None)


class _Guarded:
    """The pynvml module with every ``nvml*`` function run through a DeadlineCaller;
    constants, structures and exception classes pass through unchanged."""

    def __init__(self, nvml: Any, caller: DeadlineCaller) -> None:
        self._nvml = nvml
        self._caller = caller

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._nvml, name)
        if name.startswith("nvml") and callable(attr) and not isinstance(attr, type):
            return functools.partial(self._caller.call, name, attr)
        return attr


class _HungAt(Exception):
    """A CallHung while reading one GPU, with what was known of that GPU."""

    def __init__(self, hung: CallHung, ident: dict[str, Any]) -> None:
        self.hung = hung
        self.ident = ident
        super().__init__(str(hung))


class _GpuGone(Exception):
    def __init__(self, err: ProbeError) -> None:
        self.err = err
        super().__init__(err.message)


_SKIP = (ProbeErrorKind.NOT_SUPPORTED, ProbeErrorKind.FUNCTION_NOT_FOUND)


class _Reader:
    """Reads one GPU, recording not-supported and unreadable metrics."""

    def __init__(self, nvml: Any) -> None:
        self.N = nvml
        self.not_supported: list[str] = []
        self.unreadable: dict[str, str] = {}

    def get(self, metric: str, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except self.N.NVMLError as exc:
            err = classify_nvml_error(exc)
            if err.kind in (ProbeErrorKind.GPU_LOST, ProbeErrorKind.RESET_REQUIRED):
                raise _GpuGone(err) from exc
            if err.kind in _SKIP:
                if metric not in self.not_supported:
                    self.not_supported.append(metric)
            else:
                self.unreadable[metric] = err.message
            return None

    def field(self, metric: str, handle: Any, field_id: int) -> int | float | None:
        """One NVML field value; per-field nvmlReturn is checked (the call does not raise)."""
        values = self.get(metric, self.N.nvmlDeviceGetFieldValues, handle, [field_id])
        if values is None:
            return None
        v = values[0]
        if v.nvmlReturn != 0:
            got: int | float | None = self.get(metric, _raise, self.N, v.nvmlReturn)
            return got
        vt = v.valueType
        N = self.N
        if vt == N.NVML_VALUE_TYPE_DOUBLE:
            return float(v.value.dVal)
        if vt == N.NVML_VALUE_TYPE_UNSIGNED_INT:
            return int(v.value.uiVal)
        if vt == N.NVML_VALUE_TYPE_UNSIGNED_LONG:
            return int(v.value.ulVal)
        if vt == N.NVML_VALUE_TYPE_SIGNED_LONG_LONG:
            return int(v.value.sllVal)
        if vt == N.NVML_VALUE_TYPE_SIGNED_INT:
            return int(v.value.siVal)
        return int(v.value.ullVal)


def _raise(nvml: Any, code: int) -> None:
    raise nvml.NVMLError(code)


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class NvmlGpuBackend:
    """Reads GPUs through NVML. ``nvml`` is the pynvml module (injectable for tests).

    call_timeout_s / budget_s: each NVML call's deadline and all calls' together, seconds
    (navarch.agent.deadline; docs/agent.md "Deadlines").
    """

    name = "nvml"

    def __init__(
        self,
        nvml: Any = None,
        *,
        call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S,
        budget_s: float = DEFAULT_BUDGET_S,
    ) -> None:
        if nvml is None:
            import pynvml  # noqa: PLC0415 - keep import cost off the fake path

            nvml = pynvml
        self._nvml = nvml
        self.N: Any = nvml
        self.call_timeout_s = call_timeout_s
        self.budget_s = budget_s

    def probe(self) -> GpuProbe:
        """nvmlInit, enumerate, read every GPU, nvmlShutdown. Never raises NVMLError, and
        returns within budget_s plus one call_timeout_s whatever NVML does: a call that
        does not return is ``GpuProbe.hung``.

        Source of the calls and their meaning: gpu-health.md §1 rows 1-20.
        """
        caller = DeadlineCaller(self.call_timeout_s, self.budget_s)
        self.N = N = _Guarded(self._nvml, caller)
        try:
            try:
                N.nvmlInit()
            except (N.NVMLError, OSError) as exc:
                return GpuProbe(backend="nvml", init_error=classify_nvml_error(exc))
            return self._enumerate()
        except CallHung as exc:  # nvmlInit, the driver version or the device count
            return GpuProbe(backend="nvml", hung=HungCall(exc.call, round(exc.waited_s, 3)))
        finally:
            if caller.hung is None:
                try:
                    N.nvmlShutdown()
                except (N.NVMLError, CallHung):
                    pass
            caller.close()

    def _enumerate(self) -> GpuProbe:
        N = self.N
        driver = None
        try:
            driver = _text(N.nvmlSystemGetDriverVersion())
        except N.NVMLError:
            driver = None
        try:
            count = int(N.nvmlDeviceGetCount())
        except N.NVMLError as exc:
            return GpuProbe(
                backend="nvml", init_error=classify_nvml_error(exc), driver_version=driver
            )
        gpus: list[GpuSnapshot] = []
        handle_errors: list[tuple[int, str]] = []
        hung: HungCall | None = None
        for i in range(count):
            try:
                snap = self._read_index(i, handle_errors)
            except _HungAt as at:
                ident = at.ident
                hung = HungCall(
                    at.hung.call,
                    round(at.hung.waited_s, 3),
                    i,
                    ident.get("pci_bus_id"),
                    ident.get("uuid"),
                )
                break
            if snap is not None:
                gpus.append(snap)
        return GpuProbe(
            backend="nvml",
            gpus=tuple(gpus),
            device_count=count,
            handle_errors=tuple(handle_errors),
            driver_version=driver,
            hung=hung,
        )

    def _read_index(self, i: int, handle_errors: list[tuple[int, str]]) -> GpuSnapshot | None:
        """GPU i's snapshot, or None with its handle error recorded. Raises _HungAt."""
        N = self.N
        try:
            handle = N.nvmlDeviceGetHandleByIndex(i)
        except N.NVMLError as exc:
            handle_errors.append((i, classify_nvml_error(exc).message))
            return None
        except CallHung as exc:
            raise _HungAt(exc, {}) from exc
        snap = self._read_gpu(i, handle)
        if snap is None:
            handle_errors.append((i, "could not read UUID / PCI bus id"))
        return snap

    def _read_gpu(self, i: int, h: Any) -> GpuSnapshot | None:
        N = self.N
        r = _Reader(N)
        ident: dict[str, Any] = {
            "index": i,
            "uuid": f"index-{i}",
            "name": "unknown",
            "pci_bus_id": "unknown",
        }
        values: dict[str, Any] = {}
        known: dict[str, Any] = {}
        try:
            uuid = r.get("uuid", N.nvmlDeviceGetUUID, h)
            if uuid is not None:
                ident["uuid"] = known["uuid"] = _text(uuid)
            name = r.get("name", N.nvmlDeviceGetName, h)
            if name is not None:
                ident["name"] = _text(name)[:96]
            pci_fn = (
                getattr(N, "nvmlDeviceGetPciInfo_v3", None) or N.nvmlDeviceGetPciInfo
            )  # older bindings
            pci = r.get("pci_bus_id", pci_fn, h)
            if pci is not None:
                ident["pci_bus_id"] = known["pci_bus_id"] = normalise_bdf(_text(pci.busId))
            self._read_identity(r, h, values)
            self._read_values(r, h, values)
        except CallHung as exc:
            raise _HungAt(exc, known) from exc
        except _GpuGone as gone:
            return GpuSnapshot(
                **ident,
                lost=gone.err.kind is ProbeErrorKind.GPU_LOST,
                reset_required=gone.err.kind is ProbeErrorKind.RESET_REQUIRED,
                unreadable={**r.unreadable, "all": gone.err.message},
                not_supported=tuple(r.not_supported),
                **values,
            )
        return GpuSnapshot(
            **ident, unreadable=r.unreadable, not_supported=tuple(r.not_supported), **values
        )

    def _read_identity(self, r: _Reader, h: Any, out: dict[str, Any]) -> None:
        """The board serial and MIG mode: who the GPU is, for the report's findings."""
        N = self.N
        serial = r.get("serial", N.nvmlDeviceGetSerial, h)
        if serial is not None and _text(serial).strip():
            out["serial"] = _text(serial).strip()[:64]
        mig_fn = getattr(N, "nvmlDeviceGetMigMode", None)
        mig = r.get("mig_mode", mig_fn, h) if mig_fn is not None else None
        if mig is not None:
            enabled = getattr(N, "NVML_DEVICE_MIG_ENABLE", 1)
            out["mig_current"] = mig[0] == enabled
            out["mig_pending"] = mig[1] == enabled

    def _read_values(self, r: _Reader, h: Any, out: dict[str, Any]) -> None:
        """Every reading of one GPU into out, in a fixed call order (the order in which
        not-supported and unreadable metrics are listed)."""
        self._read_thermal_power_use(r, h, out)
        self._read_memory_errors(r, h, out)
        self._read_clocks_and_links(r, h, out)

    def _read_thermal_power_use(self, r: _Reader, h: Any, out: dict[str, Any]) -> None:
        N = self.N
        out["temperature_c"] = _f(
            r.get("temperature_c", N.nvmlDeviceGetTemperature, h, N.NVML_TEMPERATURE_GPU)
        )
        for key, which in (
            ("temperature_slowdown_c", N.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN),
            ("temperature_shutdown_c", N.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN),
            ("temperature_gpu_max_c", N.NVML_TEMPERATURE_THRESHOLD_GPU_MAX),
        ):
            out[key] = _f(r.get(key, N.nvmlDeviceGetTemperatureThreshold, h, which))
        out["power_w"] = _mw(r.get("power_w", N.nvmlDeviceGetPowerUsage, h))
        out["power_limit_w"] = _mw(r.get("power_limit_w", N.nvmlDeviceGetEnforcedPowerLimit, h))
        out["power_default_limit_w"] = _mw(
            r.get("power_default_limit_w", N.nvmlDeviceGetPowerManagementDefaultLimit, h)
        )
        mem = r.get("memory", N.nvmlDeviceGetMemoryInfo, h)
        if mem is not None:
            out["memory_used_bytes"] = int(mem.used)
            out["memory_total_bytes"] = int(mem.total)
        util = r.get("utilization_pct", N.nvmlDeviceGetUtilizationRates, h)
        if util is not None:
            out["utilization_pct"] = float(util.gpu)
        procs = r.get("process_count", N.nvmlDeviceGetComputeRunningProcesses, h)
        if procs is not None:
            out["process_count"] = len(procs)

    def _read_memory_errors(self, r: _Reader, h: Any, out: dict[str, Any]) -> None:
        N = self.N
        out["ecc_uncorrected_volatile"] = _i(
            r.get(
                "ecc_uncorrected_volatile",
                N.nvmlDeviceGetTotalEccErrors,
                h,
                N.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                N.NVML_VOLATILE_ECC,
            )
        )
        out["ecc_corrected_volatile"] = _i(
            r.get(
                "ecc_corrected_volatile",
                N.nvmlDeviceGetTotalEccErrors,
                h,
                N.NVML_MEMORY_ERROR_TYPE_CORRECTED,
                N.NVML_VOLATILE_ECC,
            )
        )
        rows = r.get("remapped_rows", N.nvmlDeviceGetRemappedRows, h)
        if rows is not None:
            corr, unc, pending, failure = rows
            out.update(
                remapped_rows_corrected=int(corr),
                remapped_rows_uncorrected=int(unc),
                remapped_rows_pending=bool(pending),
                remapped_rows_failure=bool(failure),
            )
        else:
            # Pre-Ampere GPUs retire pages instead of remapping rows (DCGM, gpu-health.md row 9).
            sbe = r.get(
                "retired_pages",
                N.nvmlDeviceGetRetiredPages,
                h,
                N.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
            )
            dbe = r.get(
                "retired_pages",
                N.nvmlDeviceGetRetiredPages,
                h,
                N.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR,
            )
            pend = r.get("retired_pages", N.nvmlDeviceGetRetiredPagesPendingStatus, h)
            out["retired_pages_sbe"] = None if sbe is None else len(sbe)
            out["retired_pages_dbe"] = None if dbe is None else len(dbe)
            out["retired_pages_pending"] = None if pend is None else bool(pend)
        ra = r.field("recovery_action", h, N.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION)
        out["recovery_action"] = None if ra is None else int(ra)

    def _read_clocks_and_links(self, r: _Reader, h: Any, out: dict[str, Any]) -> None:
        N = self.N
        reasons_fn = getattr(N, "nvmlDeviceGetCurrentClocksEventReasons", None)
        reasons = r.get("clock_event_reasons", reasons_fn, h) if reasons_fn else None
        if reasons is None and "clock_event_reasons" in r.not_supported:
            r.not_supported.remove("clock_event_reasons")
            reasons = r.get("clock_event_reasons", N.nvmlDeviceGetCurrentClocksThrottleReasons, h)
        out["clock_event_reasons"] = _i(reasons)
        out["pcie_link_width"] = _i(r.get("pcie_link_width", N.nvmlDeviceGetCurrPcieLinkWidth, h))
        out["pcie_link_width_max"] = _i(
            r.get("pcie_link_width_max", N.nvmlDeviceGetMaxPcieLinkWidth, h)
        )
        out["pcie_link_gen_max"] = _i(
            r.get("pcie_link_gen_max", N.nvmlDeviceGetMaxPcieLinkGeneration, h)
        )
        out["pcie_replay_count"] = _i(
            r.get("pcie_replay_count", N.nvmlDeviceGetPcieReplayCounter, h)
        )
        self._read_nvlink(r, h, out)
        self._read_fabric(r, h, out)
        pm = r.get("persistence_mode", N.nvmlDeviceGetPersistenceMode, h)
        out["persistence_mode"] = None if pm is None else pm == N.NVML_FEATURE_ENABLED
        out["inforom_valid"] = self._inforom(r, h)
        ecc = r.get("ecc_mode", N.nvmlDeviceGetEccMode, h)
        if ecc is not None:
            out["ecc_mode_current"] = ecc[0] == N.NVML_FEATURE_ENABLED
            out["ecc_mode_pending"] = ecc[1] == N.NVML_FEATURE_ENABLED

    def _inforom(self, r: _Reader, h: Any) -> bool | None:
        N = self.N
        try:
            N.nvmlDeviceValidateInforom(h)
            return True
        except N.NVMLError as exc:
            err = classify_nvml_error(exc)
            if err.kind is ProbeErrorKind.CORRUPTED_INFOROM:
                return False
            ok: bool | None = r.get("inforom", _raise, N, err.code or 999)
            return ok

    def _read_fabric(self, r: _Reader, h: Any, out: dict[str, Any]) -> None:
        """GPU fabric info: the v2 call (with the health mask) where the driver has it,
        else v1 (state and status only). Source: nvml.h nvmlDeviceGetGpuFabricInfoV
        (R550+) and nvmlDeviceGetGpuFabricInfo (R525+, Hopper and later); gpud's
        fabric-manager component falls back the same way."""
        N = self.N
        v_fn = getattr(N, "nvmlDeviceGetGpuFabricInfoV", None)
        v2_t = getattr(N, "c_nvmlGpuFabricInfo_v2_t", None)
        if v_fn is not None and v2_t is not None:
            info = v2_t()
            if r.get("fabric", v_fn, h, info) is not None:
                out["fabric"] = FabricInfo(
                    int(info.state), int(info.status), int(info.healthMask), int(info.cliqueId)
                )
                return
            if "fabric" not in r.not_supported:
                return
            r.not_supported.remove("fabric")
        v1_fn = getattr(N, "nvmlDeviceGetGpuFabricInfo", None)
        v1_t = getattr(N, "c_nvmlGpuFabricInfo_t", None)
        if v1_fn is None or v1_t is None:
            return
        info = v1_t()
        if r.get("fabric", v1_fn, h, info) is not None:
            out["fabric"] = FabricInfo(int(info.state), int(info.status), None, int(info.cliqueId))

    def _read_nvlink(self, r: _Reader, h: Any, out: dict[str, Any]) -> None:
        """Link states for links that exist (stop at the first NotSupported/InvalidArgument)."""
        N = self.N
        states: list[bool] = []
        totals = {"replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 0}
        counters = (
            ("replay", N.NVML_NVLINK_ERROR_DL_REPLAY),
            ("recovery", N.NVML_NVLINK_ERROR_DL_RECOVERY),
            ("crc_flit", N.NVML_NVLINK_ERROR_DL_CRC_FLIT),
            ("crc_data", N.NVML_NVLINK_ERROR_DL_CRC_DATA),
        )
        counters_ok = True
        per_link: dict[int, dict[str, int]] = {}
        for link in range(N.NVML_NVLINK_MAX_LINKS):
            try:
                state = N.nvmlDeviceGetNvLinkState(h, link)
            except N.NVMLError as exc:
                err = classify_nvml_error(exc)
                if err.kind in (ProbeErrorKind.GPU_LOST, ProbeErrorKind.RESET_REQUIRED):
                    raise _GpuGone(err) from exc
                break  # NotSupported / InvalidArgument: no such link (or no NVLink at all)
            states.append(bool(state))
            if not state or not counters_ok:
                continue
            for key, counter in counters:
                value = r.get("nvlink_errors", N.nvmlDeviceGetNvLinkErrorCounter, h, link, counter)
                if value is None:
                    counters_ok = False
                    break
                totals[key] += int(value)
                if value:
                    per_link.setdefault(link, {})[key] = int(value)
        if not states:
            r.not_supported.append("nvlink")
            return
        out["nvlink_active"] = tuple(states)
        out["nvlink_errors"] = totals if counters_ok else None
        out["nvlink_link_errors"] = per_link if counters_ok else None


def _f(v: Any) -> float | None:
    return None if v is None else float(v)


def _i(v: Any) -> int | None:
    return None if v is None else int(v)


def _mw(v: Any) -> float | None:
    return None if v is None else round(float(v) / 1000.0, 3)
