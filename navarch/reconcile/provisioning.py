"""Provisioning: launch a node in the first place of its pool that takes it.

Capacity failover (docs/design.md, Safety rules, rule 6): a provision carries its places in the
pool's order; a CapacityError marks that place exhausted with a backoff (10 min, doubling
per consecutive failure, at most 1 h) and the next place is tried. Fallover stops only for
a reason: a PlacementError (the type is not offered in that zone) is remembered like
capacity, saying why, and the next place is tried; a LaunchSpent (EC2 replayed a launch id
whose instance is gone) tries the next place (its own launch id) and moves the pool's next
node index past the node, so the next run uses a new name and launch id. QuotaError ends
the pool's provisioning for this run, AuthError the provider's, TransientError (and any
other error) the action's.

A Provisioner lives for one run (one per Executor, shared by its worker threads): the
bars it met (a provider's AuthError, a pool's QuotaError on a provider) hold for the rest
of the run, and it knows which launch ids this run's inventory already shows.

Fall-over spreads (zone_policy spread): a launch whose place had no capacity tries the
remaining zones of that placement, type and capacity fewest-first, counting the pool's
listed instances and this run's launches (those in flight too), so a run's fall-over
launches spread over the zones that have capacity instead of all landing in the first one;
an EC2 Auto Scaling group rebalances the same way when a zone cannot launch ("Auto Scaling
benefits: instance distribution", AWS Auto Scaling user guide).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from navarch.errors import (
    AuthError,
    CapacityError,
    LaunchSpent,
    PlacementError,
    ProviderError,
    QuotaError,
)
from navarch.fleet.spec import FleetSpec, PoolSpec, ZonePolicy
from navarch.inventory import TAG_POOL, TAG_SPEC, Instance, launch_id, ownership_tags
from navarch.outcome import Outcome
from navarch.planner.model import Action, Exhausted, Memory, NodeMemory, Place
from navarch.planner.payloads import ProvisionPayload
from navarch.providers.base import Provider, ProvisionRequest
from navarch.reconcile.updates import Update, chain
from navarch.report import signing
from navarch.textsafe import node_text

#: The first backoff of an exhausted place, doubling per consecutive failure up to the max.
BACKOFF_BASE_S = 600
BACKOFF_MAX_S = 3600


def backoff_s(failures: int) -> int:
    """Capacity backoff for a place after `failures` consecutive capacity errors."""
    return min(BACKOFF_BASE_S * (1 << max(failures - 1, 0)), BACKOFF_MAX_S)


def _past_node(pool: str, node: str) -> Update:
    """Raise the pool's next_index past `node` (<fleet>-<pool>-<nnnn>): its name and launch
    ids are spent, the next provision must use a new name."""
    index = int(node.rsplit("-", 1)[1])

    def update(memory: Memory) -> Memory:
        pm = memory.pool(pool)
        return memory.with_pool(replace(pm, next_index=max(pm.next_index, index + 1)))

    return update


def landed(a: Action, inst: Instance) -> str:
    """Where a launch landed, for its outcome line: " on host H (block B)" when the cloud
    says, with a warning when it is a lemon host the action asked to avoid (the provider
    could not: navarch.planner.hosts) or outside the block it asked for; "" otherwise."""
    if not inst.host_id and not inst.topology:
        return ""
    out = f" on host {node_text(inst.host_id or '-')}"
    if inst.block:
        out += f" (block {node_text(inst.block)})"
    wish = a.carries(ProvisionPayload)
    if inst.host_id and inst.host_id in wish.avoid_hosts:
        out += "; LEMON HOST: it failed before and could not be avoided"
    if wish.block and inst.block and inst.block != wish.block:
        out += f"; outside the asked block {node_text(wish.block)}"
    return out


class Provisioner:
    """The provision handler and what it remembers for one run.

    inventory: this run's listing (None when the executor runs without one: then no
    launch id is known absent); clock: the run's clock; user_data(pool, node, key,
    provider): a node's cloud-init text, with fleet_secret to derive its key (either None:
    no user-data).
    """

    def __init__(
        self,
        spec: FleetSpec,
        providers: Mapping[str, Provider],
        *,
        inventory: Sequence[Instance] | None,
        clock: Callable[[], datetime],
        user_data: Callable[[PoolSpec, str, bytes, str], str] | None,
        fleet_secret: bytes | None,
    ) -> None:
        self.spec = spec
        self.providers = providers
        self.launched = frozenset(i.launch_id for i in inventory or () if i.launch_id)
        self.fresh_inventory = inventory is not None
        self.clock = clock
        self.user_data = user_data
        self.fleet_secret = fleet_secret
        self._mutex = threading.Lock()
        # Bars met this run: provider -> its AuthError; (pool, provider) -> its QuotaError.
        self._dead_providers: dict[str, AuthError] = {}
        self._quota_pools: dict[tuple[str, str], QuotaError] = {}
        # (pool, provider, zone) -> the pool's instances there: listed, plus this run's
        # launches in flight or landed (a fall-over picks the zone with the fewest).
        self._in_zone: Counter[tuple[str, str, str]] = Counter(
            (tag, i.provider, i.zone) for i in inventory or () if (tag := i.tag(TAG_POOL))
        )

    def provision(self, a: Action) -> tuple[Outcome, Update]:
        """Launch the node in the first place that takes it, trying the action's places in
        order (zone, then type, then placement). Capacity and placement errors
        back that place off and go on; a quota or auth error bars that provider for the
        rest of the run (the action ends there when the pool has one placement)."""
        pool = self.spec.pool(a.pool)
        assert a.node is not None
        multi = len(pool.placed()) > 1
        tried: list[str] = []
        not_offered = 0  # places of `tried` that failed for another reason than capacity
        updates: list[Update] = []
        barred: tuple[QuotaError | AuthError, str] | None = None  # a bar: error, message
        barred_places = 0  # places of `tried` skipped for a bar
        no_capacity: CapacityError | None = None  # the last place's "no capacity"
        refusal: PlacementError | LaunchSpent | None = None  # the last "cannot take it"
        places = list(a.carries(ProvisionPayload).places)
        for i, place in enumerate(places):
            provider = pool.placed()[place.placement].provider
            bar = self._barred(a.pool, provider)
            if bar is None:
                try:
                    inst = self._counted_launch(a, pool, place, provider)
                except (CapacityError, PlacementError) as exc:
                    places[i + 1 :] = self._fall_over(pool, place, places[i + 1 :])
                    updates.append(
                        self.exhausted(
                            a.pool, place.zone, place.instance_type, place.spot, provider
                        )
                    )
                    offered = isinstance(exc, CapacityError)
                    if isinstance(exc, CapacityError):
                        no_capacity = exc
                    else:
                        refusal = exc
                    tried.append(f"{place.label()}: {'' if offered else 'not offered here: '}{exc}")
                    not_offered += not offered
                    continue
                except LaunchSpent as exc:
                    refusal = exc
                    updates.append(_past_node(a.pool, a.node))
                    tried.append(f"{place.label()}: launch id spent: {exc}")
                    not_offered += 1
                    continue
                except (QuotaError, AuthError) as exc:
                    bar = self._bar(a.pool, provider, exc)
                except ProviderError as exc:
                    return Outcome.failed(a, exc, f"{place.label()}: {exc}"), chain(*updates)
                else:
                    return self._launched(a, pool, place, inst, tried, not_offered, updates)
            barred = barred or bar
            if not multi:
                break
            tried.append(f"{place.label()}: {bar[1]}")
            barred_places += 1
        if barred is not None and (not multi or barred_places == len(tried)):
            return Outcome.failed(a, barred[0], barred[1]), chain(*updates)
        if not_offered and refusal is not None:
            return (
                Outcome.failed(a, refusal, "no place could take it: " + "; ".join(tried)),
                chain(*updates),
            )
        full = no_capacity or CapacityError("the pool has no place to launch in", scope="zone")
        return Outcome.failed(a, full, "no capacity: " + "; ".join(tried)), chain(*updates)

    def _barred(self, pool: str, provider: str) -> tuple[QuotaError | AuthError, str] | None:
        """(error, message) when this run already met an auth error on the provider or a
        quota error for the pool on it; None when launches may go on."""
        with self._mutex:
            dead = self._dead_providers.get(provider)
            quota = self._quota_pools.get((pool, provider))
        if dead is not None:
            return dead, f"provider {provider}: {dead}"
        if quota is not None:
            return quota, f"quota: {quota}"
        return None

    def _bar(
        self, pool: str, provider: str, exc: QuotaError | AuthError
    ) -> tuple[QuotaError | AuthError, str]:
        """Remember a quota error (for the pool on that provider) or an auth error (for
        the provider) for the rest of the run -> (error, message)."""
        with self._mutex:
            if isinstance(exc, QuotaError):
                self._quota_pools[(pool, provider)] = exc
                return exc, f"quota: {exc}"
            self._dead_providers[provider] = exc
            return exc, f"auth: {exc}"

    def _counted_launch(self, a: Action, pool: PoolSpec, place: Place, provider: str) -> Instance:
        """_launch, counting the launch in its zone while it is in flight and once it
        landed (a failed one is uncounted), for _fall_over."""
        key = (pool.name, provider, place.zone)
        with self._mutex:
            self._in_zone[key] += 1
        try:
            return self._launch(a, pool, place, provider)
        except BaseException:
            with self._mutex:
                self._in_zone[key] -= 1
            raise

    def _fall_over(self, pool: PoolSpec, failed: Place, rest: list[Place]) -> list[Place]:
        """The places left to try after `failed` had no room: in a spread pool, those of
        the same placement, type and capacity that lead `rest` (the other zones of its
        run) fewest-instances first, ties in planned order; the rest as planned."""
        if pool.zone_policy is not ZonePolicy.SPREAD:
            return rest
        same = (failed.placement, failed.instance_type, failed.spot)
        n = 0
        while n < len(rest) and (rest[n].placement, rest[n].instance_type, rest[n].spot) == same:
            n += 1
        provider = pool.placed()[failed.placement].provider
        with self._mutex:
            counts = {p.zone: self._in_zone[(pool.name, provider, p.zone)] for p in rest[:n]}
        return sorted(rest[:n], key=lambda p: counts[p.zone]) + rest[n:]

    def _launch(self, a: Action, pool: PoolSpec, place: Place, provider: str) -> Instance:
        """One launch request in one place (tags, launch id, user-data of that placement)."""
        assert a.node is not None
        user_data = ""
        if self.user_data is not None and self.fleet_secret is not None:
            key = signing.derive_node_key(self.fleet_secret, self.spec.name, a.node)
            user_data = self.user_data(pool, a.node, key, provider)
        lid = launch_id(self.spec.name, a.node, place.attempt)
        tags = {
            **dict(pool.labels),
            **ownership_tags(self.spec.name, pool.name, a.node, lid),
            TAG_SPEC: pool.launch_hash(place.placement),
        }
        request = ProvisionRequest(
            fleet=self.spec.name,
            pool=pool.name,
            node=a.node,
            zone=place.zone,
            instance_type=place.instance_type,
            spot=place.spot,
            launch_id=lid,
            attempt=place.attempt,
            tags=tags,
            user_data=user_data,
            options=pool.placed()[place.placement].options,
            known_absent=self.fresh_inventory and lid not in self.launched,
            avoid_hosts=frozenset(a.carries(ProvisionPayload).avoid_hosts),
            block=a.carries(ProvisionPayload).block,
        )
        return self.providers[provider].provision(request)

    def _launched(
        self,
        a: Action,
        pool: PoolSpec,
        place: Place,
        inst: Instance,
        tried: list[str],
        not_offered: int,
        updates: list[Update],
    ) -> tuple[Outcome, Update]:
        """The outcome of a launch that took, and its Memory update (the node with its
        launch settings; the place's backoff cleared; next_index raised)."""
        assert a.node is not None
        index = int(a.node.rsplit("-", 1)[1])
        nm = NodeMemory(
            node=a.node,
            pool=a.pool,
            instance_id=inst.instance_id,
            first_seen_at=self.clock(),
            launch=pool.launch_settings(place.placement),
        )
        here = (inst.provider, place.zone, place.instance_type, place.spot)

        def launched(m: Memory) -> Memory:
            pm = m.pool(a.pool)
            pm = replace(
                pm,
                next_index=max(pm.next_index, index + 1),
                exhausted=tuple(
                    e for e in pm.exhausted if (e.provider, e.zone, e.instance_type, e.spot) != here
                ),
            )
            return m.with_pool(pm).with_node(nm)

        why = "without capacity" if not not_offered else "that could not take it"
        where = place.label() + (f" after {Place.count(len(tried))} {why}" if tried else "")
        return Outcome.done(a, f"{inst.instance_id} in {where}{landed(a, inst)}"), chain(
            *updates, launched
        )

    def exhausted(self, pool: str, zone: str, itype: str, spot: bool, provider: str) -> Update:
        """Back off one place (provider, zone, type, spot): 10 min, doubling per failure."""
        now = self.clock()

        def update(memory: Memory) -> Memory:
            pm = memory.pool(pool)
            key = (provider, zone, itype, spot)
            prev = next(
                (e for e in pm.exhausted if (e.provider, e.zone, e.instance_type, e.spot) == key),
                None,
            )
            failures = prev.failures + 1 if prev else 1
            entry = Exhausted(
                zone,
                itype,
                spot,
                now + timedelta(seconds=backoff_s(failures)),
                failures,
                provider=provider,
            )
            rest = tuple(e for e in pm.exhausted if e is not prev)
            return memory.with_pool(replace(pm, exhausted=rest + (entry,)))

        return update
