"""Render a node's boot-time artefacts from templates/: cloud-init user-data, the agent's
configuration and its systemd units. Used by the reconciler (a provider's user-data at
launch), by `navarch render cloud-init` and by `navarch agent install`.

Templates (jinja2, StrictUndefined: a missing variable is an error, never an empty string):

- ``templates/cloud-init.yaml.j2``: the user-data a cloud provider sends to a new node;
  writes /etc/navarch/agent.yaml (0600, holds the node key) and the two units, installs
  the agent and enables the timer. Three ways to install it (AgentInstall): fetch the
  agent bundle (navarch.agent.bundle) from a pre-signed URL and check its sha256 (the
  default: no pip, no package index on the node), find it baked into the image
  (examples/image/), or pip-install a requirement (pool option ``agent_package``).
- ``templates/agent.yaml.j2``: the agent configuration (navarch.agent.config).
- ``templates/navarch-agent.service.j2`` / ``navarch-agent.timer.j2``: a oneshot service
  fired every ``interval_s`` (default 30 s: a check; the report is written on change or
  heartbeat, navarch.agent.config) with ``RandomizedDelaySec`` jitter.

Nothing here imports the agent package: launching a machine needs only text.
"""

from __future__ import annotations

import enum
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from navarch.report.acceptance import policy_to_mapping

__all__ = [
    "AgentInstall",
    "BundleSource",
    "render_cloud_init",
    "render_cloud_init_for",
    "render_agent_yaml",
    "render_units",
    "DEFAULT_INTERVAL_S",
    "DEFAULT_STATE_FILE",
]

DEFAULT_STATE_FILE = "/var/lib/navarch/agent-state.json"
DEFAULT_INTERVAL_S = 30
DEFAULT_JITTER_S = 10


def jitter_for(interval_s: int) -> int:
    """RandomizedDelaySec for a timer firing every interval_s: the default 10 s at the
    default 30 s period or longer, a fifth of a shorter period (at least 1 s), so the
    spread a fleet's checks need does not stretch a short period by half."""
    return DEFAULT_JITTER_S if interval_s >= DEFAULT_INTERVAL_S else max(1, interval_s // 5)


DEFAULT_BOOT_DELAY_S = 30
DEFAULT_TIMEOUT_S = 120
DEFAULT_VENV = "/opt/navarch"
#: Where the user-data (and examples/image/) put the agent bundle on a node.
BUNDLE_PATH = "/usr/local/lib/navarch/navarch-agent.pyz"
CONFIG_PATH = "/etc/navarch/agent.yaml"
#: The node key in user-data rendered for a person to read (`navarch render cloud-init`
#: without --reveal-key): the text stays valid cloud-init, and a node booted from it
#: signs nothing (the agent refuses a key that is not hex).
KEY_PLACEHOLDER = "REDACTED-node-key-see-navarch-render-cloud-init---reveal-key"
#: The timer's command: the system python3 in isolated mode (-I: no user site, no
#: PYTHON* variables; -S: no site-packages), so nothing installed on the image interferes.
BUNDLE_EXEC_START = f"/usr/bin/env python3 -I -S {BUNDLE_PATH} run --once --config {CONFIG_PATH}"
#: The bundle unpacks itself there once so Python caches its bytecode (navarch.agent.bundle).
BUNDLE_ENVIRONMENT = {"NAVARCH_BUNDLE_CACHE": "/var/lib/navarch/bundle"}


class AgentInstall(enum.Enum):
    """How the user-data installs the agent (see the module docstring)."""

    BUNDLE = "bundle"
    BAKED = "baked"
    PIP = "pip"


@dataclass(frozen=True)
class BundleSource:
    """Where a node fetches the agent bundle from, and the sha256 (hex) it must have
    (empty: not checked, only for an operator's agent_bundle_url without a hash)."""

    url: str
    sha256: str


_METADATA_BY_PROVIDER_TYPE = {"aws": "aws", "gcp": "gcp", "azure": "azure"}


@cache
def _env() -> Any:
    from navarch.templating import environment

    return environment(
        trim_blocks=True, keep_trailing_newline=True, filters={"shquote": shlex.quote}
    )


def _render(name: str, **values: Any) -> str:
    return str(_env().get_template(name).render(**values))


def render_agent_yaml(
    *,
    fleet: str,
    pool: str,
    node: str,
    store: str,
    node_key: bytes | None,
    gpus_per_node: int,
    instance_id: str = "",
    metadata: str = "auto",
    state_file: str = DEFAULT_STATE_FILE,
    acceptance: Mapping[str, Any] | None = None,
    network: Mapping[str, Any] | None = None,
) -> str:
    """The node's /etc/navarch/agent.yaml; node_key None writes KEY_PLACEHOLDER instead of
    the key; acceptance: the pool's acceptance policy as agent.yaml holds it
    (navarch.report.acceptance.policy_to_mapping), None for none; network: the pool's
    health.network ({ports, rate_gbps}, navarch.fleet.spec.NetworkPolicy.to_agent), None
    for none. Raises jinja2.UndefinedError on a template bug."""
    return _render(
        "agent.yaml.j2",
        fleet=fleet,
        pool=pool,
        node=node,
        store=store,
        key_hex=KEY_PLACEHOLDER if node_key is None else node_key.hex(),
        gpus_per_node=gpus_per_node,
        instance_id=instance_id,
        metadata=metadata,
        state_file=state_file,
        acceptance=acceptance,
        network=network,
    )


def render_units(
    *,
    exec_start: str,
    interval_s: int = DEFAULT_INTERVAL_S,
    jitter_s: int = DEFAULT_JITTER_S,
    boot_delay_s: int = DEFAULT_BOOT_DELAY_S,
    timeout_s: int = DEFAULT_TIMEOUT_S,
    writable_paths: Sequence[str] = ("/var/lib/navarch",),
    environment: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """{"navarch-agent.service": text, "navarch-agent.timer": text}.

    exec_start: the full command line (absolute executable). interval_s: seconds between
    runs (OnUnitActiveSec); jitter_s: RandomizedDelaySec, spreads a fleet's writes.
    environment: the service's Environment= variables (the bundle's cache directory).
    """
    common = {
        "interval_s": interval_s,
        "jitter_s": jitter_s,
        "boot_delay_s": boot_delay_s,
        "timeout_s": timeout_s,
    }
    return {
        "navarch-agent.service": _render(
            "navarch-agent.service.j2",
            exec_start=exec_start,
            writable_paths=list(writable_paths),
            environment=sorted((environment or {}).items()),
            **common,
        ),
        "navarch-agent.timer": _render("navarch-agent.timer.j2", **common),
    }


def render_cloud_init_for(
    *,
    fleet: str,
    pool: str,
    node: str,
    store: str,
    node_key: bytes | None,
    gpus_per_node: int,
    metadata: str = "auto",
    install: AgentInstall = AgentInstall.BUNDLE,
    bundle: BundleSource | None = None,
    package: str | None = None,
    interval_s: int = DEFAULT_INTERVAL_S,
    venv_dir: str = DEFAULT_VENV,
    acceptance: Mapping[str, Any] | None = None,
    network: Mapping[str, Any] | None = None,
) -> str:
    """cloud-init user-data (``#cloud-config``) from plain values; see render_cloud_init.

    install: BUNDLE needs bundle (URL + sha256); PIP installs package (default
    ``navarch==<this version>``) into venv_dir; BAKED writes only the configuration.
    node_key None: KEY_PLACEHOLDER stands for the key (text for a person to read).
    Raises ValueError for BUNDLE without a bundle.
    """
    from navarch import __version__

    if install is AgentInstall.BUNDLE and bundle is None:
        raise ValueError("install=BUNDLE needs the bundle's URL and sha256")
    agent_yaml = render_agent_yaml(
        fleet=fleet,
        pool=pool,
        node=node,
        store=store,
        node_key=node_key,
        gpus_per_node=gpus_per_node,
        metadata=metadata,
        acceptance=acceptance,
        network=network,
    )
    if install is AgentInstall.PIP:
        exec_start = f"{venv_dir}/bin/python -m navarch.agent run --once --config {CONFIG_PATH}"
        units = render_units(
            exec_start=exec_start, interval_s=interval_s, jitter_s=jitter_for(interval_s)
        )
    else:
        units = render_units(
            exec_start=BUNDLE_EXEC_START,
            interval_s=interval_s,
            jitter_s=jitter_for(interval_s),
            environment=BUNDLE_ENVIRONMENT,
        )
    return _render(
        "cloud-init.yaml.j2",
        mode=install.value,
        fleet=fleet,
        pool=pool,
        node=node,
        interval_s=interval_s,
        agent_yaml=agent_yaml.rstrip("\n"),
        service_unit=units["navarch-agent.service"].rstrip("\n"),
        timer_unit=units["navarch-agent.timer"].rstrip("\n"),
        venv_dir=venv_dir,
        package=package or f"navarch=={__version__}",
        bundle_url=bundle.url if bundle else "",
        bundle_sha256=bundle.sha256 if bundle else "",
        bundle_path=BUNDLE_PATH,
        node_command=_render("navarch-node.sh.j2", bundle_path=BUNDLE_PATH).rstrip("\n"),
    )


def render_cloud_init(
    spec: Any,
    pool: str,
    node: str,
    node_key: bytes | None,
    provider: str | None = None,
    bundle: Callable[[], BundleSource] | None = None,
) -> str:
    """The user-data a cloud provider sends to a new node of ``pool``.

    spec: navarch.fleet.spec.FleetSpec (uses .name, .store_url, .pool(pool).gpus_per_node,
    .providers[provider]["type"] to pick the metadata service, and the placement options
    ``agent_package`` (pip requirement), ``agent_bundle_url`` (+ ``agent_bundle_sha256``)
    and ``agent_baked``). provider: the placement's provider the node launches on (default
    the pool's first). node_key: ``signing.derive_node_key(secret, fleet, node)``, or None
    for KEY_PLACEHOLDER in its place (user-data shown to a person, not sent to a node).
    bundle: called only when no option overrides it, for the published bundle's source
    (navarch.reconcile.publish.AgentDelivery.get). Raises KeyError for an unknown pool,
    ValueError when the bundle is needed and none is given.
    """
    p = spec.pool(pool)
    provider = provider or p.provider
    provider_type = str((spec.providers.get(provider) or {}).get("type", provider))
    options: Mapping[str, Any] = getattr(p, "options", {}) or {}
    types: set[str] = set()
    for placement in p.placed():
        if placement.provider == provider:
            if not types:
                options = placement.options
            types.update(placement.instance_types)
    source: BundleSource | None = None
    if options.get("agent_package"):
        install = AgentInstall.PIP
    elif options.get("agent_baked"):
        install = AgentInstall.BAKED
    else:
        install = AgentInstall.BUNDLE
        if options.get("agent_bundle_url"):
            source = BundleSource(
                str(options["agent_bundle_url"]), str(options.get("agent_bundle_sha256", ""))
            )
        elif bundle is not None:
            source = bundle()
    return render_cloud_init_for(
        fleet=spec.name,
        pool=pool,
        node=node,
        store=spec.store_url,
        node_key=node_key,
        gpus_per_node=p.gpus_per_node,
        metadata=_METADATA_BY_PROVIDER_TYPE.get(provider_type, "none"),
        install=install,
        bundle=source,
        package=options.get("agent_package"),
        acceptance=_acceptance_for(p.acceptance, types, policy_to_mapping),
        network=p.health.network.to_agent(),
        interval_s=p.health.check_every_s,
    )


def _acceptance_for(
    policy: Any, types: set[str], to_mapping: Callable[[Any], dict[str, Any]]
) -> dict[str, Any] | None:
    """The pool's acceptance policy as agent.yaml holds it, naming the instance type when
    the provider's placements allow only one (so the agent holds the node to that type's
    published baseline; with several, the agent asks its metadata service)."""
    if policy is None:
        return None
    out = to_mapping(policy)
    if not out.get("instance_type") and len(types) == 1:
        out["instance_type"] = next(iter(types))
    return out
