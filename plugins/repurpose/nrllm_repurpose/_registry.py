"""Every plugin's generators and speech synthesizers, collected through the plugin's hook."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nrllm_core.log import logger
from nrllm_repurpose import hookspecs
from nrllm_repurpose._generate import GeneratorRegistry

if TYPE_CHECKING:
    from nrllm_core import PluginManager

__all__ = ["build_registry"]

_HOOK = "nrllm_repurpose_generators"


def build_registry(pm: PluginManager) -> GeneratorRegistry:
    """Every plugin's generators; each plugin registers on its own, so one that raises adds
    nothing, and a name two plugins claim is withheld from both."""
    hook = getattr(pm.hook, _HOOK, None)
    if hook is None or hook.spec is None:
        pm.add_hookspecs(hookspecs)
    claims: dict[tuple[str, str], list[tuple[str, Any]]] = {}
    for plugin_name, alone in pm.one_by_one(_HOOK):
        own = GeneratorRegistry()
        try:
            alone(registry=own)
        except Exception:
            logger().warning(
                "nrllm.repurpose.registration_failed", plugin=plugin_name, exc_info=True
            )
            continue
        for name, generator in own.generators.items():
            claims.setdefault(("format", name), []).append((plugin_name, generator))
        for name, synthesizer in own.speech.items():
            claims.setdefault(("speech", name), []).append((plugin_name, synthesizer))
    registry = GeneratorRegistry()
    for (kind, name), owners in claims.items():
        if len(owners) > 1:
            names = tuple(plugin for plugin, _ in owners)
            logger().error("nrllm.repurpose.name_clash", kind=kind, name=name, plugins=names)
        elif kind == "format":
            registry.register(owners[0][1])
        else:
            registry.register_speech(name, owners[0][1])
    return registry
