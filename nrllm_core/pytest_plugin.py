"""The pytest plugin for tool authors: the ``nrllm`` fixture and the ``nrllm_settings`` marker.

pytest loads it through the entry point group ``pytest11``. Importing it loads nothing heavy:
the store, the configuration's converter and the plugins under test load when a test asks.
"""

from __future__ import annotations

import importlib
import importlib.util
import itertools
import os
import sys
import types
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, final

import attrs
import pytest

from nrllm_core._payloads import AuditRecord, StepKind, TraceEvent, WirePayload
from nrllm_core._sink_recorder import SinkRecorder
from nrllm_core._values import Actor, ArtifactType, ToolArtifact, TrustZone
from nrllm_core.hookspecs import hookimpl

if TYPE_CHECKING:
    from nrllm_core._gate import GateReport
    from nrllm_core._host import Host
    from nrllm_core._manager import PluginManager
    from nrllm_core._messages import ChatMessage, ProviderAnswer, ToolSpec
    from nrllm_core._outcome import RunOutcome
    from nrllm_core._providers import Provider, ProviderRegistry

__all__ = ["Harness", "Invocation"]

# One request to a scripted model: the messages it was sent and the tools it was offered.
Request = tuple[tuple["ChatMessage", ...], tuple["ToolSpec", ...]]

MARKER: Final = "nrllm_settings"
# The provider kind of the inline scripts: core's ``scripted`` kind, with its requests kept.
_KIND: Final = "nrllm-pytest-scripted"
_ACTOR: Final = "tester"
# Shorter cells and texts, and numbers, are everywhere on a wire: they prove no leak.
_LEAK_MIN_CHARS: Final = 4


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(settings): the config section of the plugins the nrllm fixture loads",
    )


@pytest.fixture
def nrllm(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Harness]:
    """A harness for one test: load plugins, invoke tools, run scripted models, approve."""
    marker = request.node.get_closest_marker(MARKER)
    settings: Mapping[str, Any] | None = None
    if marker is not None:
        if len(marker.args) != 1 or not isinstance(marker.args[0], Mapping) or marker.kwargs:
            raise pytest.UsageError(f"@pytest.mark.{MARKER} takes one dict: the section")
        settings = marker.args[0]
    harness = Harness(folder=tmp_path_factory.mktemp("nrllm"), marker_settings=settings)
    yield harness
    harness.close()


@final
@attrs.frozen(kw_only=True)
class Invocation:
    """What one call delivered to each sink."""

    wire: WirePayload
    trace: TraceEvent
    audit: AuditRecord

    @property
    def artifacts(self) -> tuple[ToolArtifact, ...]:
        return self.trace.step.tool_artifacts

    @property
    def content(self) -> str:
        return self.wire.content

    @property
    def is_error(self) -> bool:
        return self.wire.is_error


class Harness:
    """Plugins loaded without installing them, next to a recorder of every sink, on a host
    with a temporary store and a configuration built from what the test sets."""

    def __init__(self, *, folder: Path, marker_settings: Mapping[str, Any] | None) -> None:
        self.folder = folder
        #: the ``[privacy] level`` of the audit records (``metadata`` unless changed).
        self.privacy = "metadata"
        #: more host configuration (``tools``, ``skills``, ...), merged into what is generated.
        self.config: dict[str, Any] = {}
        #: everything the wire, trace and audit sinks received in this test.
        self.sinks = SinkRecorder()
        #: every request a scripted model received: its messages and the tools offered.
        self.requests: list[Request] = []
        self._marker_settings = marker_settings
        self._sections: dict[str, Mapping[str, Any]] = {}
        self._providers: dict[str, dict[str, Any]] = {}
        self._runs = itertools.count(1)
        self._pm: PluginManager | None = None
        self._host: Host | None = None

    # -- plugins -----------------------------------------------------------------------------

    @property
    def pm(self) -> PluginManager:
        """The plugin manager: core's plugins, the recorder and what the test loaded."""
        if self._pm is None:
            from nrllm_core._manager import make_plugin_manager

            self._pm = make_plugin_manager(
                plugins=[self.sinks, _ScriptedKind(self.requests)], load_entry_points=False
            )
            # Tools are registered with the harness's own configuration, as a host's are.
            self._pm.use_config(self._config)
        return self._pm

    def load(self, module_or_path: object, settings: Mapping[str, Any] | None = None) -> str:
        """Register a plugin module (a module, a dotted name, or a file or package folder)
        under its entry-point name, and give it ``settings`` as its section (else the
        marker's). Returns the name, which is its section's name. Any other object with
        ``@hookimpl`` methods (a test's plugin double) is registered under pluggy's name."""
        if not isinstance(module_or_path, types.ModuleType | str | os.PathLike):
            name = self.pm.get_canonical_name(module_or_path)
            self._register(module_or_path, name, settings)
            return name
        module = _module(module_or_path)
        name = _plugin_name(module)
        self._register(module, name, settings)
        return name

    def load_installed(self, name: str, settings: Mapping[str, Any] | None = None) -> str:
        """Register the installed entry point ``name`` of the group ``nrllm``."""
        from importlib import metadata

        from nrllm_core._manager import ENTRY_POINT_GROUP

        found = {ep.name: ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}
        if name not in found:
            known = ", ".join(sorted(found)) or "none"
            raise LookupError(f'no installed nrllm plugin "{name}" (installed: {known})')
        self._register(found[name].load(), name, settings)
        return name

    def _register(self, plugin: object, name: str, settings: Mapping[str, Any] | None) -> None:
        self.pm.register(plugin, name=name)
        section = self._marker_settings if settings is None else settings
        if section is not None:
            self._sections[name] = section

    # -- calls -------------------------------------------------------------------------------

    @property
    def host(self) -> Host:
        """The host the calls and runs go through (built on first use)."""
        if self._host is None:
            from nrllm_core._host import Host
            from nrllm_core.store import Store

            store = Store.open(None, data_dir=self.folder)
            self._host = Host(
                pm=self.pm,
                config_loader=self._config,
                store=store,
                data_dir=self.folder,
                environ={},
            )
        return self._host

    def _config(self) -> Any:
        from nrllm_core._config import load_config

        data: dict[str, Any] = {
            "actor": {"id": _ACTOR},
            "privacy": {"level": self.privacy},
            **self._sections,
            **self.config,
        }
        providers = {**self._providers, **dict(self.config.get("providers", {}))}
        data["providers"] = providers
        return load_config(
            data=data,
            plugin_sections=self._sections,
            settings_classes=self.pm.settings_classes(),
        )

    def invoke(self, tool: str, /, **arguments: Any) -> Invocation:
        """One direct call through the seam, as the person at the keyboard."""
        wire = self.host.invoke(tool, arguments)
        trace = next(e for e in reversed(self.sinks.trace) if e.step.kind is StepKind.TOOL)
        audit = next(r for r in reversed(self.sinks.audit) if r.sequence == trace.sequence)
        return Invocation(wire=wire, trace=trace, audit=audit)

    def run(
        self,
        prompt: str,
        *,
        script: Sequence[Mapping[str, Any]],
        zone: TrustZone = TrustZone.EXTERNAL_GLOBAL,
    ) -> RunOutcome:
        """Run ``prompt`` against a model that answers with ``script``'s turns, in order
        (the ``scripted`` provider's format: ``content``, ``tool_calls``, ``usage``)."""
        return self.host.run(prompt, provider=self.scripted(script, zone=zone))

    def scripted(
        self,
        script: Sequence[Mapping[str, Any]],
        *,
        zone: TrustZone = TrustZone.EXTERNAL_GLOBAL,
    ) -> str:
        """Configure a model that answers with ``script``'s turns and return its provider
        name, for a run started by hand (``AsyncHost(nrllm.host).run(prompt, provider=...)``,
        ``nrllm.host.stream(...)``)."""
        from nrllm_core import _json

        name = f"scripted_{next(self._runs)}"
        path = self.folder / f"{name}.json"
        path.write_bytes(_json.dumps({"turns": list(script)}))
        self._providers[name] = {"kind": _KIND, "script": str(path), "trust_zone": zone.value}
        return name

    def approve(self, outcome: RunOutcome) -> RunOutcome:
        """Approve the suspended turn of ``outcome`` and continue the run."""
        return self._decide(outcome, approve=True)

    def deny(self, outcome: RunOutcome) -> RunOutcome:
        """Deny the suspended turn of ``outcome`` and continue the run."""
        return self._decide(outcome, approve=False)

    def _decide(self, outcome: RunOutcome, *, approve: bool) -> RunOutcome:
        return self.host.approve(
            outcome.run_id, approve=approve, approver=_ACTOR, turn_digest=outcome.turn_digest
        )

    def offered(self, zone: TrustZone, skill: str | None = None) -> GateReport:
        """The gate's report for a run on a provider in ``zone`` (and ``skill``)."""
        from nrllm_core._gate import decide

        name = f"zone_{zone.value}"
        self._providers.setdefault(name, {"kind": _KIND, "trust_zone": zone.value})
        return decide(
            self.pm.catalog(), self._config(), provider=name, skill=skill, actor=Actor(id=_ACTOR)
        )

    def close(self) -> None:
        """Close the store (the fixture does, after the test)."""
        if self._host is not None:
            self._host.store.close()

    # -- checks ------------------------------------------------------------------------------

    def assert_no_artifact_on_wire(self) -> None:
        """Fail with the first artifact cell or text of this test found in a wire payload or
        in a request to a model. Cells and texts under four characters, and numbers, are
        not checked: they are on every wire."""
        secrets = list(_artifact_strings(self.sinks.trace))
        for where, text in self._wire_texts():
            for origin, secret in secrets:
                if secret in text:
                    pytest.fail(f"{origin} is on the wire: {secret!r} in {where}", pytrace=False)

    def _wire_texts(self) -> Iterator[tuple[str, str]]:
        for payload in self.sinks.wire:
            yield f'the wire payload of call "{payload.call_id}"', payload.content
        for number, (messages, _) in enumerate(self.requests, start=1):
            for index, message in enumerate(messages):
                where = f"model request {number}, message {index + 1} ({message.role.value})"
                yield where, message.content or ""
                for call in message.tool_calls:
                    yield f"{where}, call arguments", repr(call.arguments)


def _artifact_strings(events: Sequence[TraceEvent]) -> Iterator[tuple[str, str]]:
    for event in events:
        name = event.step.fields.get("tool_name")
        for artifact in event.step.tool_artifacts:
            origin = f'an artifact of "{name}" (run {event.run_id}, step {event.sequence})'
            if artifact.type is ArtifactType.TABLE:
                strings = [cell for row in artifact.data["rows"] for cell in row]
            else:
                strings = [artifact.data["text"]]
            for text in strings:
                text = text.strip()
                if len(text) >= _LEAK_MIN_CHARS and not _is_number(text):
                    yield origin, text


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _module(module_or_path: types.ModuleType | str | os.PathLike[str]) -> types.ModuleType:
    if isinstance(module_or_path, types.ModuleType):
        return module_or_path
    text = os.fspath(module_or_path)
    if isinstance(module_or_path, os.PathLike) or os.sep in text or text.endswith(".py"):
        return _module_from_path(Path(text))
    return importlib.import_module(text)


def _module_from_path(path: Path) -> types.ModuleType:
    """A module file or a package folder, imported under its own name without installing."""
    path = path.resolve()
    package = path.is_dir()
    init = path / "__init__.py" if package else path
    name = path.name if package else path.stem
    spec = importlib.util.spec_from_file_location(
        name, init, submodule_search_locations=[str(path)] if package else None
    )
    if spec is None or spec.loader is None or not init.is_file():
        raise FileNotFoundError(f"no Python module at {path}")
    module = importlib.util.module_from_spec(spec)
    # Registered before it runs, so the package's own imports of its submodules find it.
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _plugin_name(module: types.ModuleType) -> str:
    """The entry-point name: installed, else in the ``pyproject.toml`` above a loaded folder,
    else the module's own name."""
    from nrllm_core._manager import entry_point_name

    installed = entry_point_name(module)
    if installed is not None:
        return installed
    source = getattr(module, "__file__", None)
    if source is not None:
        declared = _declared_entry_point(Path(source), module.__name__)
        if declared is not None:
            return declared
    return module.__name__


def _declared_entry_point(source: Path, module: str) -> str | None:
    import tomllib

    from nrllm_core._manager import ENTRY_POINT_GROUP

    for folder in source.parents:
        project = folder / "pyproject.toml"
        if project.is_file():
            data = tomllib.loads(project.read_text(encoding="utf-8"))
            points = data.get("project", {}).get("entry-points", {}).get(ENTRY_POINT_GROUP, {})
            return next((name for name, value in points.items() if value == module), None)
    return None


class _ScriptedKind:
    """Registers the inline scripts' kind: core's scripted provider, its requests kept."""

    def __init__(self, requests: list[Request]) -> None:
        self.requests = requests

    @hookimpl
    def nrllm_register_providers(self, registry: ProviderRegistry) -> None:
        registry.register(_KIND, self._build)

    def _build(
        self,
        name: str,
        settings: Mapping[str, Any],
        *,
        config_dir: Path | None,
        environ: Mapping[str, str],
    ) -> Provider:
        from nrllm_core.providers._scripted import scripted_factory

        return _Recorded(
            scripted_factory(name, settings, config_dir=config_dir, environ=environ),
            self.requests,
        )


@final
@attrs.frozen
class _Recorded:
    model: Provider
    requests: list[Request]

    def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec]
    ) -> ProviderAnswer:
        self.requests.append((tuple(messages), tuple(tools)))
        return self.model.complete(messages, tools)
