"""`navarch mcp`, `navarch ssh` and `navarch simulate`: sessions beside the fleet rather
than changes to it (an assistant's server, a shell on a node, a simulated fleet)."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from navarch.cli.plumbing import EXIT_OK, fleet_argument, node_parser
from navarch.cli.sweeps import add_arguments
from navarch.errors import ConfigError, NavarchError

__all__ = ["register"]


def cmd_mcp(args: argparse.Namespace) -> int:
    """`navarch mcp FLEET [--allow-actions [--confirm-code stderr|tty]]`: serve the fleet
    to an MCP client over stdio (navarch.mcp.server) until the client closes the pipe."""
    from navarch.extras import import_extra

    server = import_extra("navarch.mcp.server", "mcp", "navarch mcp")
    if args.confirm_code and not args.allow_actions:
        raise ConfigError(
            "--confirm-code confirms acting tools, and this server has none",
            hint="add --allow-actions, or drop --confirm-code",
        )
    server.serve(
        args.fleet,
        allow_actions=args.allow_actions,
        now=args.clock,
        confirm_code=server.CodeChannel(args.confirm_code) if args.confirm_code else None,
    )
    return EXIT_OK


def cmd_ssh(args: argparse.Namespace) -> int:
    """`navarch ssh FLEET NODE [-- CMD]`: OpenSSH to the node's address with its pool's
    settings (navarch.remote.session); exits with ssh's own exit code."""
    import shutil
    import subprocess

    from navarch import api
    from navarch.api.reading import node_instance
    from navarch.extras import import_extra

    # The pool's ssh settings are read by the playbook runner's module (fabric, paramiko):
    # without the extra, one line says which to install.
    SSHSettings = import_extra("navarch.remote.runner", "ssh", "navarch ssh").SSHSettings
    from navarch.remote.session import ssh_argv

    fleet = api.load_fleet(args.fleet)
    inst = node_instance(fleet, args.node)
    pool = fleet.spec.pool(inst.pool or "")
    settings = SSHSettings.from_mapping(pool.ssh, base_dir=fleet.spec.base_dir, pool=pool.name)
    command = list(args.remote_command)
    if command[:1] == ["--"]:
        command = command[1:]
    argv = ssh_argv(settings, inst.address or "", command)
    if shutil.which(argv[0]) is None:
        raise NavarchError(
            "no `ssh` client on PATH: install OpenSSH's client "
            "(Debian: apt-get install openssh-client)"
        )
    sys.stdout.flush()
    return subprocess.run(argv, check=False).returncode


#: `--compare` given without a scenario: compare the policies.
COMPARE_POLICIES = "policies"


def cmd_simulate(args: argparse.Namespace) -> int:
    """Simulate a scenario (or two with --compare OTHER, or the four policies of
    navarch.simulate.policies with a bare --compare) on the real planner; exit 1 when an
    `assert:` line fails (docs/simulate.md)."""
    from navarch.cli.sweeps import cmd_merge, cmd_sweep
    from navarch.logs import progress
    from navarch.simulate.engine import simulate
    from navarch.simulate.policies import compare_scenarios
    from navarch.simulate.report import (
        check_asserts,
        compare_table,
        summary_rows,
        to_html,
        to_json,
    )
    from navarch.simulate.scenario import load_scenario

    if args.scenario == "merge":
        return cmd_merge(args)
    if args.seeds or args.index is not None or args.emit:
        if not args.seeds:
            raise ConfigError(
                "--index and --emit run a sweep: give --seeds too", key_path="--seeds"
            )
        return cmd_sweep(args)

    # Every simulated node runs the real agent, whose logs are for journald on a machine
    # (a first run without a state file warns, for each of a thousand nodes).
    logging.getLogger("navarch.agent").setLevel(logging.ERROR)
    first = load_scenario(args.scenario)
    if args.compare == COMPARE_POLICIES:
        scenarios = compare_scenarios(first)
    else:
        scenarios = [first] + ([load_scenario(args.compare)] if args.compare else [])
    docs, texts, failed = [], [], False
    seed = args.seed
    for scenario in scenarios:
        path = scenario.source
        seed = scenario.seed if seed is None else seed  # --compare: all on the same seed
        # A bar on a terminal's stderr, as apply shows; nothing when stderr is a pipe.
        with progress(scenario.ticks, f"simulating {scenario.name}", enabled=True) as bar:
            doc = simulate(scenario, seed=seed, on_tick=bar.advance)
        try:
            doc["asserts"] = check_asserts(doc, scenario.asserts)
        except ValueError as exc:
            raise ConfigError(
                str(exc), file=str(path), key_path="assert", hint="e.g. availability >= 0.999"
            ) from exc
        docs.append(doc)
        texts.append(f"# {scenario.name}\n" + Path(path).read_text())
        print(f"scenario {doc['scenario']} (seed {doc['seed']})")
        for key, value in summary_rows(doc):
            print(f"  {key:30} {value}")
        for a in doc["asserts"]:
            failed = failed or not a["ok"]
            print(f"  {'PASS' if a['ok'] else 'FAIL'} {a['assert']} (value {a['value']})")
        sys.stdout.flush()  # each policy of --compare shows as it finishes, piped or not
    if len(docs) > 1:
        print(compare_table(docs))
    if args.json:
        out = docs[0] if len(docs) == 1 else {"runs": docs}
        Path(args.json).write_text(to_json(out))
    if args.html:
        Path(args.html).write_text(to_html(docs, texts))
    return 1 if failed else 0


def register(sub: Any) -> None:
    """Add mcp, ssh and simulate to navarch's subparsers."""
    s = sub.add_parser("mcp", help="serve the fleet to an assistant: an MCP server on stdio")
    fleet_argument(s)
    s.add_argument(
        "--allow-actions",
        action="store_true",
        help="also offer apply, cordon, uncordon and replace (audited with the client's "
        "name); without it every tool only reads. Each acts only with a person's consent, "
        "asked by the server, never taken from the model: the client shows the person the "
        "plan through MCP elicitation and they accept, or (--confirm-code) the person reads "
        "a one-time code on the server's terminal and gives it. A plan fingerprint names "
        "the plan and is not consent; with neither way to ask, acting tools refuse",
    )
    s.add_argument(
        "--confirm-code",
        choices=("stderr", "tty"),
        default=None,
        help="ask consent by a one-time code written, with the plan, to the server's "
        "standard error (the terminal that started it, or the client's server log) or its "
        "controlling terminal (tty), never to the assistant; every acting call then needs "
        "the code, even from a client that supports elicitation. Give it only where the "
        "assistant cannot read that output",
    )
    s.set_defaults(func=cmd_mcp)

    s = node_parser(sub, "ssh", "open an SSH session to a node (its pool's ssh settings)")
    s.add_argument(
        "remote_command",
        nargs=argparse.REMAINDER,
        metavar="-- CMD",
        help="run this command instead of a login shell",
    )
    s.set_defaults(func=cmd_ssh)

    s = sub.add_parser("simulate", help="simulate a scenario on the real planner, virtual clock")
    s.add_argument("scenario", help="the scenario file; `merge DIR` pools a sweep's results")
    s.add_argument("--seed", type=int, default=None, help="override the scenario's seed")
    s.add_argument("--json", default=None, help="write the result document here")
    s.add_argument("--html", default=None, help="write a self-contained HTML report here")
    s.add_argument(
        "--compare",
        nargs="?",
        const=COMPARE_POLICIES,
        default=None,
        metavar="OTHER",
        help="a second scenario, run on the same seed; alone: the scenario under four "
        "policies (default, spares, replace-only, reboot-first-without-surge)",
    )
    add_arguments(s)
    s.set_defaults(func=cmd_simulate)
