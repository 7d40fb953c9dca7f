"""`navarch ssh FLEET NODE [-- CMD]`: an interactive SSH session to a node, so on-call does
not hunt for addresses.

The node's address comes from its provider's listing (the same inventory a plan uses), the
user, port, key, known_hosts, host-key policy, timeout and jump host from the pool's `ssh`
mapping in fleet.yaml, the same settings the playbooks use (navarch.remote.runner). The
session itself is OpenSSH's `ssh` client: a terminal, agent forwarding and the user's own
~/.ssh/config work as they always do.
"""

from __future__ import annotations

from collections.abc import Sequence

from navarch.errors import NavarchError
from navarch.inventory import Instance
from navarch.remote.runner import SSHSettings


def ssh_argv(settings: SSHSettings, address: str, command: Sequence[str] = ()) -> list[str]:
    """The OpenSSH command line for a session to `address` with the pool's settings.

    command: run this instead of a login shell (after `--`). Pure; no I/O.
    Source of the options: ssh(1) and ssh_config(5) (-p, -i, -J, -o StrictHostKeyChecking,
    UserKnownHostsFile, ConnectTimeout).
    """
    argv = [
        "ssh",
        "-p",
        str(settings.port),
        "-o",
        f"ConnectTimeout={settings.connect_timeout_s}",
        "-o",
        f"StrictHostKeyChecking={'yes' if settings.strict_host_keys else 'no'}",
    ]
    if settings.key_file is not None:
        argv += ["-i", str(settings.key_file), "-o", "IdentitiesOnly=yes"]
    if settings.known_hosts is not None:
        argv += ["-o", f"UserKnownHostsFile={settings.known_hosts}"]
    if settings.jump_host:
        argv += ["-J", settings.jump_host]
    argv.append(f"{settings.user}@{address}")
    if command:
        argv += ["--", *command]
    return argv


def node_instance(inventory: Sequence[Instance], fleet: str, node: str) -> Instance:
    """The one instance of `fleet` named `node` that has an address.

    Raises NavarchError saying why not: no such node (with `navarch status` to list them),
    several instances under one name, or no address reported by the provider yet.
    """
    found = [i for i in inventory if i.fleet == fleet and i.node == node]
    if not found:
        raise NavarchError(
            f"{node} is not a node of fleet {fleet} (`navarch status FLEET --all` lists them)"
        )
    if len(found) > 1:
        raise NavarchError(
            f"{node} names {len(found)} instances "
            f"({', '.join(i.instance_id for i in found)}); pick one by its "
            "address in `navarch status FLEET --json`"
        )
    inst = found[0]
    if not inst.address:
        raise NavarchError(
            f"{node} ({inst.instance_id}) has no address from provider "
            f"{inst.provider} yet; it may still be provisioning"
        )
    return inst
