"""`navarch local ...`: drive the embedded local provider's machines (tick every agent,
inject a fault, reboot, launch a foreign machine), through navarch.providers.local.ops."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from navarch.cli.plumbing import EXIT_OK, fleet_argument, node_argument

__all__ = ["register"]


def _spec(path: str) -> Any:
    from navarch import api

    return api.load_fleet(path).spec


def cmd_local_tick(args: argparse.Namespace) -> int:
    """`navarch local tick`: every local node's agent reports once."""
    from navarch.fleet.secret import ensure_local_secret
    from navarch.providers.local import ops as local_ops

    spec = _spec(args.fleet)
    ensure_local_secret(spec)  # the local agents sign with it: tick acts on the fleet
    # The agents' own JSON logs are for journald on real machines; here each node's
    # outcome is the line printed below.
    logging.getLogger("navarch.agent").setLevel(logging.ERROR)
    results = local_ops.tick(spec, now=args.clock(), agent_clock_skew_s=args.agent_clock_skew)
    for r in results:
        print(f"{r.node}: {r.status}")
    if not results:
        print("No local nodes yet: run `navarch apply` first.")
    return EXIT_OK


def cmd_local_inject(args: argparse.Namespace) -> int:
    """`navarch local inject`: faults into one local node (see navarch.providers.local.ops.inject)."""
    from navarch.providers.local import ops as local_ops

    faults = (
        args.xid,
        args.gpu_lost or None,
        args.temperature,
        args.ecc,
        args.utilization,
        args.processes,
        args.silent or None,
        args.resume or None,
        args.preempt or None,
        args.impaired or None,
        args.clear or None,
        args.acceptance or None,
        args.fault,
        args.kernel_line or None,
    )
    if all(f is None for f in faults):
        args.inject_parser.error(
            "no fault given: pass at least one of --xid, --gpu-lost, "
            "--temperature, --ecc, --utilization, --processes, --silent, "
            "--resume, --preempt, --impaired, --clear, --acceptance, --fault, --kernel-line"
        )
    spec = _spec(args.fleet)
    silent = True if args.silent else (False if args.resume else None)
    done = local_ops.inject(
        spec,
        args.node,
        xid=args.xid,
        gpu=args.gpu,
        gpu_lost=args.gpu_lost,
        temperature_c=args.temperature,
        ecc_uncorrected=args.ecc,
        utilization_pct=args.utilization,
        processes=args.processes,
        silent=silent,
        preempt=args.preempt,
        impaired=args.impaired,
        clear=args.clear,
        acceptance=args.acceptance or (),
        fault=args.fault,
        kernel_lines=args.kernel_line or (),
    )
    for line in done or ["nothing to inject (see --help)"]:
        print(f"{args.node}: {line}")
    return EXIT_OK


def cmd_local_reboot(args: argparse.Namespace) -> int:
    """`navarch local reboot`: new boot id for a local node."""
    from navarch.providers.local import ops as local_ops

    local_ops.reboot(_spec(args.fleet), args.node)
    print(f"{args.node}: rebooted (new boot id; kernel log and faults cleared)")
    return EXIT_OK


def cmd_local_foreign(args: argparse.Namespace) -> int:
    """`navarch local launch-foreign`: a machine without navarch's tags."""
    from navarch.providers.local import ops as local_ops

    iid = local_ops.launch_foreign(_spec(args.fleet), args.zone, args.instance_type)
    print(f"launched foreign machine {iid} (no navarch tags)")
    return EXIT_OK


def register(sub: Any) -> None:
    """Add `navarch local ...` (tick, inject, reboot, launch-foreign) to the subparsers."""
    local = sub.add_parser("local", help="drive the embedded local provider's machines")
    lsub = local.add_subparsers(dest="local_command", required=True, metavar="COMMAND")
    s = lsub.add_parser("tick", help="fire every local node's agent once, as its timer would")
    fleet_argument(s)
    s.add_argument(
        "--agent-clock-skew",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="the agents' clocks run this far ahead (negative: behind) of the "
        "store's, which stamps each report with the tick's time",
    )
    s.set_defaults(func=cmd_local_tick)
    s = lsub.add_parser("inject", help="inject a fault into a local node")
    fleet_argument(s)
    node_argument(s)
    s.add_argument("--xid", type=int, help="append an NVRM Xid line with this code")
    s.add_argument("--gpu", type=int, default=0, help="GPU index the fault hits (default 0)")
    s.add_argument("--gpu-lost", action="store_true", help="the GPU fell off the bus")
    s.add_argument("--temperature", type=float, metavar="C", help="GPU temperature, Celsius")
    s.add_argument("--ecc", type=int, metavar="N", help="volatile uncorrectable ECC errors")
    s.add_argument("--utilization", type=float, metavar="PCT", help="utilisation of every GPU")
    s.add_argument("--processes", type=int, metavar="N", help="GPU processes on the GPU")
    s.add_argument("--silent", action="store_true", help="the agent stops reporting")
    s.add_argument("--resume", action="store_true", help="the agent reports again")
    s.add_argument("--preempt", action="store_true", help="a spot preemption notice")
    s.add_argument(
        "--impaired",
        action="store_true",
        help="the cloud lists the instance impaired (a dead host; add --silent for its agent)",
    )
    s.add_argument(
        "--clear",
        action="store_true",
        help="remove every injected fault (and the impairment) first",
    )
    s.add_argument(
        "--acceptance",
        action="append",
        metavar="KEY=VALUE",
        help="what the node's acceptance tools report on its next acceptance (repeatable): "
        "nccl_busbw_gbps=120, nvbandwidth_d2d_gbps=200, dcgm_diag=fail, gpu_count=7, "
        "pcie_width=8, driver=550.54.14 (docs/acceptance.md lists every key)",
    )
    s.add_argument(
        "--fault",
        metavar="CLASS",
        help="a fault of this class (or its representative kind): network (ib_link_flap), "
        "fabric, host_cpu (a soft-lockup kernel line), host_memory, host_storage, pcie, "
        "clock, gpu_hung; README.md lists what each injects",
    )
    s.add_argument(
        "--kernel-line",
        action="append",
        metavar="TEXT",
        help="append this line to the node's kernel log, read by its agent's next check "
        "(repeatable)",
    )
    s.set_defaults(func=cmd_local_inject, inject_parser=s)
    s = lsub.add_parser("reboot", help="reboot a local node (new boot id, faults cleared)")
    fleet_argument(s)
    node_argument(s)
    s.set_defaults(func=cmd_local_reboot)
    s = lsub.add_parser("launch-foreign", help="start a machine without navarch tags")
    fleet_argument(s)
    s.add_argument("--zone", default="sim-1a")
    s.add_argument("--instance-type", default="sim-h100x8")
    s.set_defaults(func=cmd_local_foreign)
