"""Repurpose a web page or a PDF into other formats, in jobs processed outside the run.

Importing this package loads neither SQLAlchemy nor click: the store, the worker and the
commands load when they are used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nrllm_core import ToolRegistry, hookimpl
from nrllm_repurpose._formats import list_repurpose_formats
from nrllm_repurpose._generate import (
    FinishContext,
    GenerationFailed,
    Generator,
    GeneratorRegistry,
    Output,
    SpeechSynthesizer,
)
from nrllm_repurpose._settings import RepurposeSettings
from nrllm_repurpose._start import StartRepurposeJob

if TYPE_CHECKING:
    import click

# What a plugin adding formats through ``nrllm_repurpose_generators`` needs.
__all__ = [
    "FinishContext",
    "GenerationFailed",
    "Generator",
    "GeneratorRegistry",
    "Output",
    "SpeechSynthesizer",
    "StartRepurposeJob",
]


@hookimpl
def nrllm_register_tools(registry: ToolRegistry) -> None:
    """Register the repurpose tools."""
    registry.register(list_repurpose_formats)
    registry.register(StartRepurposeJob())


@hookimpl
def nrllm_settings_class(plugin_name: str) -> type[RepurposeSettings]:
    """``[repurpose]`` is checked by core when the configuration loads."""
    return RepurposeSettings


@hookimpl
def nrllm_register_commands(cli: click.Group) -> None:
    """Add ``nrllm repurpose``."""
    from nrllm_repurpose._cli import repurpose

    cli.add_command(repurpose)


# Optional: the specification is added by the worker, after the plugins have loaded.
@hookimpl(optionalhook=True)
def nrllm_repurpose_generators(registry: GeneratorRegistry) -> None:
    """Register the nine default formats."""
    from nrllm_repurpose._generate import default_generators

    for generator in default_generators():
        registry.register(generator)
