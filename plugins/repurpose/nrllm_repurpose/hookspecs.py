"""The hook the repurpose plugin adds to nrllm: more generators and speech synthesizers.

The worker adds this specification to its plugin manager when it builds its generator registry,
after the plugins have loaded. An implementation must therefore be marked
``@nrllm_core.hookimpl(optionalhook=True)``, or nrllm refuses it as a hook nobody specified.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

from nrllm_core.hookspecs import PROJECT_NAME

if TYPE_CHECKING:
    from nrllm_repurpose._generate import GeneratorRegistry

_spec = pluggy.HookspecMarker(PROJECT_NAME)


@_spec
def nrllm_repurpose_generators(registry: GeneratorRegistry) -> None:
    """Register generators for repurpose formats, and speech synthesizers for podcast audio.

    Call ``registry.register(Generator(...))`` and ``registry.register_speech(name, synth)``.
    A format or a speech name registered by two plugins is withheld from both; an implementation
    that raises adds nothing.

    :param registry: collects this plugin's generators and synthesizers.
    """
