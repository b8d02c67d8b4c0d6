"""The pytest plugin for tool authors: the ``nrllm`` fixture and the ``nrllm_settings`` marker.

pytest loads it through the entry point group ``pytest11``. Importing it loads nothing heavy:
the store, the configuration's converter and the plugins under test load when a test asks.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import itertools
import os
import sys
import types
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, final

import attrs
import pytest

from nrllm_core._payloads import AuditRecord, StepKind, TraceEvent, WirePayload
from nrllm_core._sink_recorder import SinkRecorder
from nrllm_core._tool import ToolContext
from nrllm_core._values import Actor, ArtifactType, ToolArtifact, ToolResult, TrustZone
from nrllm_core.hookspecs import hookimpl

if TYPE_CHECKING:
    from nrllm_core._gate import GateReport
    from nrllm_core._host import Host
    from nrllm_core._manager import PluginManager
    from nrllm_core._messages import ChatMessage, ProviderAnswer, ToolCall, ToolSpec
    from nrllm_core._outcome import RunOutcome
    from nrllm_core._providers import Provider, ProviderRegistry

__all__ = ["Harness", "Invocation"]

# One request to a scripted model: the messages it was sent and the tools it was offered.
Request = tuple[tuple["ChatMessage", ...], tuple["ToolSpec", ...]]

MARKER: Final = "nrllm_settings"
# The provider kind of the inline scripts: core's ``scripted`` kind, with its requests kept.
_KIND: Final = "nrllm-pytest-scripted"
_ACTOR: Final = "tester"


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
        # What each tool returned, before the seam, by run and call id.
        self._returned = _Returned()
        # The run each request and wire payload belongs to, by its index, where a harness
        # call made it.
        self._request_runs: dict[int, str] = {}
        self._wire_runs: dict[int, str] = {}
        # Every answer a scripted model gave: the model's own text, which it may repeat.
        self._answers: list[ProviderAnswer] = []
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
                plugins=[self.sinks, self._returned, _ScriptedKind(self.requests, self._answers)],
                load_entry_points=False,
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

    def invoke(self, tool: str, /, *, deps: Any = None, **arguments: Any) -> Invocation:
        """One direct call through the seam, as the person at the keyboard; ``deps`` is what
        the tool's ``context.deps`` holds (so a tool argument cannot be named ``deps`` here)."""
        wires = len(self.sinks.wire)
        wire = self.host.invoke(tool, arguments, deps=deps)
        trace = next(e for e in reversed(self.sinks.trace) if e.step.kind is StepKind.TOOL)
        audit = next(r for r in reversed(self.sinks.audit) if r.sequence == trace.sequence)
        self._wire_runs.update(dict.fromkeys(range(wires, len(self.sinks.wire)), trace.run_id))
        return Invocation(wire=wire, trace=trace, audit=audit)

    def run(
        self,
        prompt: str,
        *,
        script: Sequence[Mapping[str, Any]],
        zone: TrustZone = TrustZone.EXTERNAL_GLOBAL,
        deps: Any = None,
    ) -> RunOutcome:
        """Run ``prompt`` against a model that answers with ``script``'s turns, in order
        (the ``scripted`` provider's format: ``content``, ``tool_calls``, ``usage``), its
        tools given ``deps``."""
        provider = self.scripted(script, zone=zone)
        return self._of_its_run(lambda: self.host.run(prompt, provider=provider, deps=deps))

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

    def approve(self, outcome: RunOutcome, *, deps: Any = None) -> RunOutcome:
        """Approve the suspended turn of ``outcome`` and continue the run (its tools given
        ``deps``)."""
        return self._decide(outcome, approve=True, deps=deps)

    def deny(self, outcome: RunOutcome, *, deps: Any = None) -> RunOutcome:
        """Deny the suspended turn of ``outcome`` and continue the run."""
        return self._decide(outcome, approve=False, deps=deps)

    def _decide(self, outcome: RunOutcome, *, approve: bool, deps: Any) -> RunOutcome:
        return self._of_its_run(
            lambda: self.host.approve(
                outcome.run_id,
                approve=approve,
                approver=_ACTOR,
                turn_digest=outcome.turn_digest,
                deps=deps,
            )
        )

    def _of_its_run(self, drive: Callable[[], RunOutcome]) -> RunOutcome:
        """``drive`` a run, and note that the requests and wire payloads it made are its."""
        requests, wires = len(self.requests), len(self.sinks.wire)
        outcome = drive()
        run = outcome.run_id
        self._request_runs.update(dict.fromkeys(range(requests, len(self.requests)), run))
        self._wire_runs.update(dict.fromkeys(range(wires, len(self.sinks.wire)), run))
        return outcome

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
        """Fail with the first artifact value of this test (a table's cell, a text artifact's
        text) found in a wire payload or a model request where none of its sources has it.

        What each tool returned is recorded around ``nrllm_execute_tool``, before the seam,
        keyed by run and call id. A call's wire payload, and the tool message that carries it
        to the model, may hold the content that call's tool returned; every payload and
        message may hold the test's prompts (the user and system messages) and the model's own
        answers (its text and its calls' arguments). Anything else the wire holds of an
        artifact, as the tool returned it or as the trace shows it, is a leak, wherever it was
        made: in the seam, a hook, the driver or the provider's message building. A payload
        or request the harness did not make itself (a run started by hand on ``host``) is
        matched by call id alone, across runs."""
        artifacts = [*_artifact_values(self.sinks.trace), *self._returned.artifact_values()]
        shared = [*self._prompts(), *_answer_texts(self._answers)]
        for where, text, run_id, call_id in self._wire_texts():
            own = [*self._returned.contents(run_id, call_id), *shared]
            for origin, value in artifacts:
                if value in text and not any(value in source for source in own):
                    pytest.fail(f"{origin} is on the wire: {value!r} in {where}", pytrace=False)

    def _prompts(self) -> Iterator[str]:
        from nrllm_core._messages import Role

        for messages, _ in self.requests:
            yield from (m.content for m in messages if m.role in (Role.SYSTEM, Role.USER))

    def _wire_texts(self) -> Iterator[tuple[str, str, str | None, str | None]]:
        """Each text of a wire payload or a model request, where it is, and the run and call
        whose content it carries (call ``None``: a model's message; run ``None``: not known)."""
        from nrllm_core._messages import Role

        for index, payload in enumerate(self.sinks.wire):
            where = f'the wire payload of call "{payload.call_id}"'
            yield where, payload.content, self._wire_runs.get(index), payload.call_id
        for number, (messages, _) in enumerate(self.requests, start=1):
            run_id = self._request_runs.get(number - 1)
            for index, message in enumerate(messages):
                where = f"model request {number}, message {index + 1} ({message.role.value})"
                if message.role is Role.TOOL:
                    yield where, message.content, run_id, message.tool_call_id
                elif message.role is Role.ASSISTANT:
                    yield where, message.content, run_id, None
                    for call in message.tool_calls:
                        for text in _call_texts(call):
                            yield f"{where}, call arguments", text, run_id, None


def _artifact_values(events: Sequence[TraceEvent]) -> Iterator[tuple[str, str]]:
    for event in events:
        name = event.step.fields.get("tool_name")
        origin = f'an artifact of "{name}" (run {event.run_id}, step {event.sequence})'
        for artifact in event.step.tool_artifacts:
            yield from ((origin, value) for value in _values(artifact))


def _values(artifact: ToolArtifact) -> Iterator[str]:
    """The texts of an artifact as a tool made it (unchecked: anything not text is skipped)."""
    data = artifact.data
    if artifact.type is ArtifactType.TABLE:
        rows = data.get("rows", ()) if isinstance(data, Mapping) else ()
        values = [cell for row in rows if isinstance(row, list | tuple) for cell in row]
    else:
        values = [data.get("text")] if isinstance(data, Mapping) else []
    for value in values:
        # Blank cells are in every text; what is around a value is not the value.
        if isinstance(value, str) and value.strip():
            yield value.strip()


class _Returned:
    """Records what each tool call's implementation returned, before the seam bounds it."""

    def __init__(self) -> None:
        self.results: dict[tuple[str, str], list[ToolResult]] = {}

    @hookimpl(wrapper=True)
    def nrllm_execute_tool(
        self, tool: Any, arguments: Any, context: ToolContext
    ) -> Generator[None, Any, Any]:
        answer = yield
        key = (context.run_id, context.call_id)
        if not inspect.isawaitable(answer):
            self._keep(key, answer)
            return answer

        async def kept() -> Any:
            result = await answer
            self._keep(key, result)
            return result

        return kept()

    def _keep(self, key: tuple[str, str], result: object) -> None:
        if isinstance(result, ToolResult):
            self.results.setdefault(key, []).append(result)

    def contents(self, run_id: str | None, call_id: str | None) -> Iterator[str]:
        """The contents returned for ``call_id`` in ``run_id`` (in any run: ``None``)."""
        if call_id is None:
            return
        for (run, call), results in self.results.items():
            if call == call_id and run_id in (None, run):
                yield from (r.content for r in results if isinstance(r.content, str))

    def artifact_values(self) -> Iterator[tuple[str, str]]:
        for (run, call), results in self.results.items():
            origin = f"an artifact returned for call {call} (run {run})"
            for result in results:
                for artifact in result.artifacts:
                    yield from ((origin, value) for value in _values(artifact))


def _answer_texts(answers: Sequence[ProviderAnswer]) -> Iterator[str]:
    for answer in answers:
        yield answer.content
        for call in answer.tool_calls:
            yield from _call_texts(call)


def _call_texts(call: ToolCall) -> Iterator[str]:
    """The strings of a call's arguments, keys and values, at any depth; malformed arguments
    as the model sent them."""
    if call.raw_arguments is not None:
        yield call.raw_arguments
    pending: list[object] = [call.arguments]
    while pending:
        value = pending.pop()
        if isinstance(value, str):
            yield value
        elif isinstance(value, Mapping):
            pending.extend(value.keys())
            pending.extend(value.values())
        elif isinstance(value, list | tuple):
            pending.extend(value)


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

    def __init__(self, requests: list[Request], answers: list[ProviderAnswer]) -> None:
        self.requests = requests
        self.answers = answers

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
            self.answers,
        )


@final
@attrs.frozen
class _Recorded:
    model: Provider
    requests: list[Request]
    answers: list[ProviderAnswer]

    def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec]
    ) -> ProviderAnswer:
        self.requests.append((tuple(messages), tuple(tools)))
        answer = self.model.complete(messages, tools)
        self.answers.append(answer)
        return answer
