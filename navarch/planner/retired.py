"""A removed pool's settings: what navarch keeps of a pool so that, once the pool has left
fleet.yaml, its nodes (orphans) are cordoned, drained and terminated like any other node.

observe() records settings_of(pool) in PoolMemory every run the pool is declared;
retired_pool() turns what was recorded (or nothing, for a state written before navarch kept
it) back into the PoolSpec that the drain and terminate stages, the drain check and the
playbook runner read. Pure data, no I/O.
"""

from __future__ import annotations

from navarch.fleet.spec import Autoscaling, HealthPolicy, Placement, PoolSpec, Replacement
from navarch.planner.model import PoolSettings

#: What an orphan is retired with when its pool's settings are unknown: scheduler none
#: (drained once its report shows no GPU processes, or at drain_timeout) and
#: fleet.schema.json's defaults for drain_timeout, stale_after and max_unavailable.
UNKNOWN = PoolSettings()


def settings_of(pool: PoolSpec) -> PoolSettings:
    """The settings a declared pool's nodes would be retired with: its scheduler, playbook
    overrides and ssh mapping as declared, drain_timeout and stale_after in seconds, and
    max_unavailable as a node count of its target (HealthPolicy.max_unavailable_nodes)."""
    h = pool.health
    return PoolSettings(
        scheduler=pool.scheduler,
        playbooks=tuple(sorted((str(k), str(v)) for k, v in pool.playbooks.items())),
        ssh=tuple(sorted((str(k), v) for k, v in pool.ssh.items())),
        drain_timeout_s=h.drain_timeout_s,
        stale_after_s=h.stale_after_s,
        max_unavailable=h.max_unavailable_nodes(pool.target_nodes),
    )


def retired_pool(name: str, settings: PoolSettings | None) -> PoolSpec:
    """The PoolSpec of a pool no longer in fleet.yaml, from its recorded settings (None:
    UNKNOWN). Only what retiring a node reads is meaningful: scheduler, playbooks, ssh,
    health.drain_timeout_s, health.stale_after_s and health.max_unavailable; it declares no
    node (target 0) and no place to launch in, so nothing is ever provisioned for it."""
    s = settings or UNKNOWN
    return PoolSpec(
        name=name,
        placements=(Placement("", "", "", (), (), "on-demand", {}),),
        gpus_per_node=0,
        min_nodes=0,
        target_nodes=0,
        max_nodes=0,
        labels=(),
        scheduler=s.scheduler,
        playbooks=dict(s.playbooks),
        ssh=dict(s.ssh),
        health=HealthPolicy(
            unhealthy_after=1,
            stale_after_s=s.stale_after_s,
            offline_after_s=s.stale_after_s,
            boot_timeout_s=0,
            drain_timeout_s=s.drain_timeout_s,
            auto_replace=False,
            max_unavailable=s.max_unavailable,
            replacement=Replacement.AFTER_TERMINATE,
            max_surge=0,
        ),
        autoscaling=Autoscaling(False, 0.0, 0.0, 0),
    )
