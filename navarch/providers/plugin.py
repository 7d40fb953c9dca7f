"""Provider plugins: the navarch.providers entry-point contract, and the guard that wraps
what a plugin builds (see navarch.plugins for discovery and the failure rule)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from navarch.capabilities import Capability
from navarch.errors import PluginError
from navarch.inventory import Instance
from navarch.plugins import Group, PluginRef, call, check_shape, load
from navarch.providers.base import Provider, ProvisionRequest, ensure_no_ownership_tags

__all__ = ["CheckedProvider", "ProviderFactory", "open_plugin_provider"]

_PROVIDER_METHODS = ("list_instances", "provision", "terminate", "reboot", "update_tags")


@runtime_checkable
class ProviderFactory(Protocol):
    """navarch.providers: build a Provider for one `providers.<name>` entry of fleet.yaml."""

    def __call__(
        self, name: str, config: Mapping[str, Any], *, base_dir: Path, fleet: str
    ) -> Provider:
        """Return a Provider (navarch.providers.base.Provider) named `name`.

        Inputs: name is the provider's key in fleet.yaml; config its whole mapping (with
        `type` equal to the entry point's name; navarch's schema checks only `type`, so
        validate the rest here and raise ConfigError naming `providers.<name>.<key>`);
        base_dir is the fleet file's directory (resolve relative paths against it); fleet is
        the fleet name. Must not call the cloud: navarch builds every provider before a run.

        The Provider must honour navarch.providers.base's contract:
        - list_instances(fleet) -> Sequence[Instance], every instance of the fleet
          (pending..stopped), tags as given at launch. Listing foreign instances is allowed.
        - provision(request) -> Instance, idempotent on request.launch_id: a repeated call
          (a killed run's retry) returns the instance the first call made, never a second.
        - terminate(instances), reboot(instances), update_tags(instance, tags): refuse
          instances without navarch-fleet=<fleet> (navarch.providers.base.ensure_owned)
          before any call; terminate of an instance already gone is success.
        - Errors: raise only navarch errors, mapped in one place: CapacityError or
          PlacementError (navarch falls over to the next zone/type), QuotaError, AuthError,
          TransientError (retried next run), ProviderError otherwise.

        navarch guarantees: one apply at a time per fleet (the store lease), only instances
        carrying this fleet's tags are passed to terminate/reboot/update_tags, actions on a
        node run in order, and at most `max_parallel` actions run at once per provider.
        Any other exception, or a result of the wrong type, becomes PluginError (exit 1).
        """
        ...


class CheckedProvider:
    """A plugin's Provider behind navarch's guard: unexpected exceptions and wrong return
    types become PluginError naming the plugin (see the module docstring)."""

    def __init__(self, ref: PluginRef, inner: Any) -> None:
        self._ref = ref
        self._inner = inner
        self.name: str = str(getattr(inner, "name", ref.name))
        # A plugin that declares no capabilities is asked for nothing beyond the base calls.
        caps = getattr(inner, "capabilities", Capability.NONE)
        self.capabilities = caps if isinstance(caps, Capability) else Capability.NONE

    def __getattr__(self, attr: str) -> Any:  # anything beyond the contract passes through
        return getattr(self._inner, attr)

    def list_instances(self, fleet: str) -> Sequence[Instance]:
        got = call(self._ref, self._inner.list_instances, fleet)
        if not isinstance(got, (list, tuple)) or not all(isinstance(i, Instance) for i in got):
            raise PluginError(self._ref, "list_instances did not return a list of Instance")
        return tuple(got)

    def provision(self, request: ProvisionRequest) -> Instance:
        got = call(self._ref, self._inner.provision, request)
        if not isinstance(got, Instance):
            raise PluginError(
                self._ref, f"provision returned a {type(got).__name__}, not an Instance"
            )
        return got

    def terminate(self, instances: Sequence[Instance]) -> None:
        call(self._ref, self._inner.terminate, instances)

    def reboot(self, instances: Sequence[Instance]) -> None:
        call(self._ref, self._inner.reboot, instances)

    def update_tags(self, instance: Instance, tags: Mapping[str, str]) -> None:
        # A plugin cannot be trusted to guard navarch's ownership tags itself.
        ensure_no_ownership_tags(instance, tags)
        call(self._ref, self._inner.update_tags, instance, tags)


def open_plugin_provider(
    name: str, config: Mapping[str, Any], *, base_dir: Path, fleet: str
) -> Provider | None:
    """Build provider `name` from the navarch.providers plugin named by config["type"]
    -> a guarded Provider, or None when no such plugin is installed. Raises PluginError."""
    found = load(Group.PROVIDERS, str(config.get("type")))
    if found is None:
        return None
    ref, factory = found
    provider = call(ref, factory, name, config, base_dir=base_dir, fleet=fleet)
    check_shape(ref, provider, "Provider", _PROVIDER_METHODS)
    return CheckedProvider(ref, provider)
