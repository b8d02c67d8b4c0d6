"""The plugin manager: entry-point loading on request, and the one typed facade over ``pm.hook``."""

from __future__ import annotations

import os
import traceback
import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from importlib import metadata
from typing import TYPE_CHECKING, Any, Final, final

import attrs
import pluggy

from nrllm_core import _defaults, hookspecs
from nrllm_core._catalog import ToolCatalog, ToolRegistry, WithheldTool, snapshot
from nrllm_core._payloads import AuditRecord, TraceEvent, WirePayload
from nrllm_core._providers import ProviderRegistry
from nrllm_core._tool import Tool, ToolContext
from nrllm_core._trace_context import checked_trace_context
from nrllm_core._values import DataClass
from nrllm_core.log import logger

if TYPE_CHECKING:
    import click

    from nrllm_core._config import HostConfig, StoreConfig

__all__ = ["PluginManager", "PluginRecord", "make_plugin_manager"]

ENTRY_POINT_GROUP: Final = "nrllm"
_CORE_PLUGIN: Final = "nrllm.defaults"
_PROVIDERS_PLUGIN: Final = "nrllm.providers"
_NO_HOOKS: Final = "no nrllm hook implementations (did you forget @hookimpl?)"
# The hooks the catalog is built from (tools, their data classes, the settings they get).
# Calls a hook's implementations (all, or some) with keyword arguments, as pluggy does.
_Caller = Callable[..., Any]
_CATALOG_HOOKS: Final = frozenset(
    {"nrllm_register_tools", "nrllm_tool_data_class", "nrllm_settings_class"}
)


@final
@attrs.frozen(kw_only=True)
class PluginRecord:
    """One plugin as ``nrllm plugins`` shows it."""

    name: str
    distribution: str | None
    version: str | None
    hooks: tuple[str, ...]
    tools: tuple[str, ...]
    error: str | None
    withheld: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # The formatted traceback of a plugin whose import raised.
    traceback: str | None = None


@final
class PluginManager(pluggy.PluginManager):
    """A pluggy manager for the ``nrllm`` project with typed calls for every hook."""

    def __init__(self) -> None:
        super().__init__(hookspecs.PROJECT_NAME)
        self.add_hookspecs(hookspecs)
        self.load_errors: dict[str, str] = {}
        self.load_tracebacks: dict[str, str] = {}
        self.distributions: dict[str, tuple[str, str]] = {}
        self._catalog: ToolCatalog | None = None
        self._providers: ProviderRegistry | None = None
        # Per hook: each implementing plugin's name and its caller of that plugin alone.
        self._alone: dict[str, tuple[tuple[str, _Caller], ...]] = {}
        self._sink_calls: dict[str, tuple[tuple[str, Callable[[object], object]], ...]] = {}
        self._execute: _Caller | None = None
        self._monitored = False
        self._settings_classes: Mapping[str, type[Any]] | None = None
        self._host_config: Callable[[], HostConfig] | None = None
        # What the catalog's plugins were handed: it is built again when that changes.
        self._catalog_inputs: object = None

    # Registering or removing a plugin changes which tools, kinds and sinks exist.
    def register(self, plugin: object, name: str | None = None) -> str | None:
        registered = super().register(plugin, name)
        self._forget(self._hooks_of(plugin))
        return registered

    def unregister(self, plugin: object | None = None, name: str | None = None) -> Any:
        hooks = self._hooks_of(self.get_plugin(name) if plugin is None and name else plugin)
        removed = super().unregister(plugin, name)
        self._forget(hooks)
        return removed

    def add_hookspecs(self, module_or_class: types.ModuleType | type) -> None:
        super().add_hookspecs(module_or_class)
        self._forget(None)

    def _hooks_of(self, plugin: object) -> frozenset[str] | None:
        """The hooks ``plugin`` implements; ``None`` when it is not registered."""
        callers = None if plugin is None else self.get_hookcallers(plugin)
        return None if callers is None else frozenset(caller.name for caller in callers)

    def _forget(self, hooks: frozenset[str] | None) -> None:
        """Drop what was collected from the plugins; the catalog only when ``hooks`` (those
        of the plugin that came or went, ``None``: unknown) include one it is built from.
        A sink registered after the first call (``nrllm invoke``'s recorder) so neither
        rebuilds the tools nor logs their name clashes a second time."""
        if hooks is None or hooks & _CATALOG_HOOKS:
            self._catalog = None
        self._providers = None
        self._alone = {}
        self._sink_calls = {}
        self._execute = None
        self._settings_classes = None

    def add_hookcall_monitoring(
        self,
        before: Callable[[str, Sequence[pluggy.HookImpl], Mapping[str, Any]], None],
        after: Callable[
            [pluggy.Result[Any], str, Sequence[pluggy.HookImpl], Mapping[str, Any]], None
        ],
    ) -> Callable[[], None]:
        # A monitor sees every hook call: from now on each goes through pluggy's own dispatch.
        self._monitored = True
        self._alone = {}
        self._sink_calls = {}
        self._execute = None
        return super().add_hookcall_monitoring(before, after)

    def one_by_one(self, hook_name: str) -> tuple[tuple[str, Callable[..., Any]], ...]:
        """Each plugin implementing ``hook_name``, in pluggy's calling order, with a caller of
        that plugin's implementation alone (keyword arguments, as every hook call): one
        failing cannot keep the others from being called, and none sees what another is
        given (its own settings, its own registry). A plugin's own hook (added with
        ``add_hookspecs``) is called the same way, so that what each plugin registers is known
        to be its own; wrappers and hook-call monitors still apply."""
        callers = self._alone.get(hook_name)
        if callers is None:
            callers = self._alone[hook_name] = tuple(
                (impl.plugin_name, self._caller(hook_name, [impl]))
                for impl in reversed(getattr(self.hook, hook_name).get_hookimpls())
            )
        return callers

    def _needs_pluggy(self, impl: pluggy.HookImpl) -> bool:
        """Whether calling ``impl`` needs pluggy's own machinery: a monitor, a wrapper, or an
        argument with a default (which pluggy leaves to the implementation)."""
        return self._monitored or impl.wrapper or impl.hookwrapper or bool(impl.kwargnames)

    def _caller(self, hook_name: str, implementations: Sequence[pluggy.HookImpl]) -> _Caller:
        """A caller of ``implementations`` (some of ``hook_name``'s) that answers as pluggy's
        does. It is pluggy's own when a wrapper, an argument with a default or a hook-call
        monitor needs its machinery; otherwise each implementation is called directly, in
        pluggy's order with the arguments it names, giving the first non-``None`` answer or
        all of them as the hook's specification says: pluggy's dispatch costs several times
        a direct call, and a tool call makes four hook calls."""
        hook = getattr(self.hook, hook_name)
        if any(self._needs_pluggy(impl) for impl in implementations):
            others = {impl.plugin for impl in hook.get_hookimpls()}
            return self.subset_hook_caller(
                hook_name, others - {impl.plugin for impl in implementations}
            )
        firstresult = bool(hook.spec and hook.spec.opts.get("firstresult"))
        order = [(impl.function, impl.argnames) for impl in reversed(implementations)]

        def call(**kwargs: object) -> Any:
            answers = []
            for function, names in order:
                answer = function(*map(kwargs.__getitem__, names))
                if answer is not None and firstresult:
                    return answer
                if answer is not None:
                    answers.append(answer)
            return None if firstresult else answers

        return call

    # -- tools -------------------------------------------------------------------------------

    def use_config(self, load: Callable[[], HostConfig]) -> None:
        """Register tools with the host's configuration, as ``load`` returns it when the
        catalog is needed: each plugin's ``nrllm_register_tools`` that names ``settings`` or
        ``store`` receives its own section and the ``[store]`` section, and the catalog is
        built again when what it received changed. A manager never given one reads the
        configuration a host given no path reads (``$NRLLM_CONFIG``, else ``./nrllm.toml``)."""
        self._host_config = load
        self._catalog = None

    def catalog(self) -> ToolCatalog:
        """Every registered tool, built once per set of plugins and of their configuration
        (as it was when the catalog was built, or last handed over by ``deliver_settings``);
        a plugin implementing none of the hooks it is built from (a sink) leaves it as it is.

        Read on every tool call, so it never reads the configuration itself once built."""
        if self._catalog is None:
            inputs = self._registration_inputs()
            self._catalog = self._build_catalog(inputs)
            self._catalog_inputs = inputs
        return self._catalog

    def _registration_inputs(self) -> dict[str, tuple[Any, StoreConfig]] | None:
        """Each configuration-taking plugin's section and ``[store]``; ``None`` when the
        configuration cannot be read (those plugins then register nothing: fail closed)."""
        takers = self._config_takers()
        if not takers:
            return {}
        if self._host_config is None:
            # Given no host's configuration, the one a host given no path reads.
            from nrllm_core._config import config_loader

            self._host_config = config_loader(
                plugin_sections=lambda: [name for name, _ in self.list_name_plugin()],
                settings_classes=self.settings_classes,
            )
        try:
            config = self._host_config()
        except Exception:
            logger().error("nrllm.plugin.config_unreadable", exc_info=True)
            return None
        sections, store = config.plugin_settings, config.store
        return {name: (_own_section(sections, name), store) for name in takers}

    def _config_takers(self) -> list[str]:
        """The plugins whose ``nrllm_register_tools`` names ``settings`` or ``store``."""
        return [
            impl.plugin_name
            for impl in self.hook.nrllm_register_tools.get_hookimpls()
            if {"settings", "store"} & {*impl.argnames, *impl.kwargnames}
        ]

    def _build_catalog(self, inputs: Mapping[str, tuple[Any, StoreConfig]] | None) -> ToolCatalog:
        # A claim is a tool, or the reason (and its detail) its plugin withholds that name for.
        owners: dict[str, list[tuple[str, Tool | tuple[str, str | None]]]] = {}
        errors: dict[str, str] = {}
        takers = self._config_takers()
        for plugin_name, alone in reversed(self.one_by_one("nrllm_register_tools")):
            registry = ToolRegistry()
            if inputs is None and plugin_name in takers:
                errors[plugin_name] = "registration failed: the configuration cannot be read"
                continue
            settings, store = (inputs or {}).get(plugin_name, (_own_section({}, plugin_name), None))
            try:
                alone(registry=registry, settings=settings, store=store)
            except Exception as exc:
                errors[plugin_name] = f"registration failed: {type(exc).__name__}: {exc}"
                logger().warning(
                    "nrllm.plugin.registration_failed", plugin=plugin_name, exc_info=True
                )
                continue
            for tool in registry.tools:
                owners.setdefault(tool.name, []).append((plugin_name, tool))
            for name, reason, detail in registry.withheld:
                owners.setdefault(name, []).append((plugin_name, (reason, detail)))
        tools = {}
        withheld: dict[str, WithheldTool] = {}
        clashes: dict[str, tuple[str, ...]] = {}
        for name, claims in owners.items():
            if len(claims) > 1:
                clashes[name] = tuple(plugin for plugin, _ in claims)
                logger().error("nrllm.tool.name_clash", tool=name, plugins=clashes[name])
                continue
            plugin_name, claim = claims[0]
            if isinstance(claim, tuple):
                reason, detail = claim
                withheld[name] = WithheldTool(
                    name=name, plugin=plugin_name, reason=reason, detail=detail
                )
                continue
            tools[name] = snapshot(claim, plugin_name, self.tool_data_class(claim))
        return ToolCatalog(tools=tools, clashes=clashes, errors=errors, withheld=withheld)

    # -- providers ---------------------------------------------------------------------------

    def provider_registry(self) -> ProviderRegistry:
        """Every registered provider kind, collected once per set of plugins."""
        if self._providers is None:
            self._providers = self._build_provider_registry()
        return self._providers

    def _build_provider_registry(self) -> ProviderRegistry:
        """Each plugin registers on its own: a failing plugin adds no kind at all, and a kind
        two plugins claim is withheld from both, as a clashing tool name is."""
        claims: dict[str, list[tuple[str, Any]]] = {}
        for plugin_name, alone in self.one_by_one("nrllm_register_providers"):
            own = ProviderRegistry()
            try:
                alone(registry=own)
            except Exception:
                logger().warning(
                    "nrllm.plugin.registration_failed", plugin=plugin_name, exc_info=True
                )
                continue
            for kind in own.kinds:
                claims.setdefault(kind, []).append((plugin_name, own.kind(kind)))
        registry = ProviderRegistry()
        for kind, owners in claims.items():
            if len(owners) > 1:
                plugins = tuple(plugin for plugin, _ in owners)
                logger().error("nrllm.provider.kind_clash", kind=kind, plugins=plugins)
                continue
            found = owners[0][1]
            # Everything the kind registered, as it registered it.
            registry.register(kind, **attrs.asdict(found, recurse=False))
        return registry

    # -- plugin settings -----------------------------------------------------------------------

    def settings_classes(self) -> Mapping[str, type[Any]]:
        """Each plugin's settings class by its section name, collected once per set of plugins."""
        if self._settings_classes is None:
            self._settings_classes = types.MappingProxyType(self._build_settings_classes())
        return self._settings_classes

    def _build_settings_classes(self) -> dict[str, type[Any]]:
        """Each plugin is asked on its own, with its own name: it answers for its section only."""
        classes: dict[str, type[Any]] = {}
        for name, alone in reversed(self.one_by_one("nrllm_settings_class")):
            try:
                answers = alone(plugin_name=name)
                # One plugin's call answers at most once (``None`` is no answer).
                (answer,) = answers or (None,)
            except Exception:
                logger().warning("nrllm.plugin.settings_class_failed", plugin=name, exc_info=True)
                continue
            if answer is None:
                continue
            if not (isinstance(answer, type) and attrs.has(answer)):
                logger().warning(
                    "nrllm.plugin.settings_class_invalid", plugin=name, got=type(answer).__name__
                )
                continue
            classes[name] = answer
        return classes

    # -- the typed facade ----------------------------------------------------------------------

    def tool_data_class(self, tool: Tool) -> list[DataClass | None]:
        """Every plugin's answer for ``tool``; a failing hook counts as the strictest answer."""
        try:
            answers: list[DataClass | None] = self.hook.nrllm_tool_data_class(tool=tool)
        except Exception:
            logger().warning("nrllm.data_class.hook_failed", tool=tool.name, exc_info=True)
            return [DataClass.SECRET_ADJACENT]
        return [
            a if a is None or isinstance(a, DataClass) else DataClass.SECRET_ADJACENT
            for a in answers
        ]

    def register_commands(self, cli: click.Group) -> None:
        """Let every plugin add its subcommands to the ``nrllm`` group."""
        self.hook.nrllm_register_commands(cli=cli)

    def execute_tool(self, tool: Tool, arguments: dict[str, Any], context: ToolContext) -> object:
        """The first non-``None`` answer of ``nrllm_execute_tool``; unchecked until the seam."""
        execute = self._execute
        if execute is None:
            implementations = self.hook.nrllm_execute_tool.get_hookimpls()
            execute = self._execute = self._caller("nrllm_execute_tool", implementations)
        return execute(tool=tool, arguments=arguments, context=context)

    def emit_wire(self, payload: WirePayload) -> bool:
        return self._emit("nrllm_wire", payload)

    def emit_trace(self, event: TraceEvent) -> bool:
        return self._emit("nrllm_trace", event)

    def emit_audit(self, record: AuditRecord) -> bool:
        return self._emit("nrllm_audit", record)

    def _emit(self, hook_name: str, payload: object) -> bool:
        """Call every sink on its own, so that one failing sink cannot skip the others."""
        delivered = True
        sinks = self._sink_calls.get(hook_name)
        if sinks is None:
            sinks = self._sinks(hook_name)
        for plugin_name, sink in sinks:
            try:
                sink(payload)
            except Exception:
                delivered = False
                logger().error(
                    "nrllm.sink.failed", hook=hook_name, plugin=plugin_name, exc_info=True
                )
        return delivered

    def _sinks(self, hook_name: str) -> tuple[tuple[str, Callable[[object], object]], ...]:
        """Each sink plugin's caller of its payload alone. Sinks run for every step, so a sink
        that needs none of pluggy's machinery is its own function, called with the payload
        when it names the argument (as pluggy calls it) and without it otherwise."""
        hook = getattr(self.hook, hook_name)
        (argument,) = hook.spec.argnames
        direct = {
            impl.plugin_name: impl for impl in hook.get_hookimpls() if not self._needs_pluggy(impl)
        }
        sinks = self._sink_calls[hook_name] = tuple(
            (name, _sink_call(direct.get(name), caller, argument))
            for name, caller in self.one_by_one(hook_name)
        )
        return sinks

    def trace_context(self, run_id: str) -> dict[str, str] | None:
        """The checked W3C trace context a plugin gives for a run being suspended, or ``None``."""
        try:
            answer = self.hook.nrllm_trace_context(run_id=run_id)
        except Exception:
            logger().error("nrllm.sink.failed", hook="nrllm_trace_context", exc_info=True)
            return None
        checked = checked_trace_context(answer)
        if answer is not None and checked is None:
            logger().warning("nrllm.trace_context.refused", run_id=run_id)
        return checked

    def deliver_settings(self, sections: Mapping[str, Any]) -> None:
        """Hand each ``nrllm_settings`` implementation its own plugin's section only, and
        build the catalog again if what its configuration-taking plugins registered with
        changed (a host calls this as each run segment starts)."""
        if self._catalog is not None and self._registration_inputs() != self._catalog_inputs:
            self._catalog = None
        for plugin_name, alone in self.one_by_one("nrllm_settings"):
            try:
                alone(settings=_own_section(sections, plugin_name))
            except Exception:
                logger().error(
                    "nrllm.sink.failed", hook="nrllm_settings", plugin=plugin_name, exc_info=True
                )

    # -- reporting ---------------------------------------------------------------------------

    def plugin_records(self) -> list[PluginRecord]:
        """Each plugin with its provenance, hooks, tools and load error."""
        catalog = self.catalog()
        records = []
        for name, plugin in self.list_name_plugin():
            if plugin is None:
                continue
            dist, version = self.distributions.get(name, (None, None))
            if name in (_CORE_PLUGIN, _PROVIDERS_PLUGIN):
                dist, version = "nrllm-core", _version("nrllm-core")
            callers = self.get_hookcallers(plugin) or []
            records.append(
                PluginRecord(
                    name=name,
                    distribution=dist,
                    version=version,
                    hooks=tuple(sorted(c.name for c in callers)),
                    tools=tuple(sorted(t.name for t in catalog.tools.values() if t.plugin == name)),
                    error=catalog.errors.get(name),
                    withheld=tuple(
                        (tool, owners)
                        for tool, owners in sorted(catalog.clashes.items())
                        if name in owners
                    ),
                )
            )
        for name, error in sorted(self.load_errors.items()):
            dist, version = self.distributions.get(name, (None, None))
            records.append(
                PluginRecord(
                    name=name,
                    distribution=dist,
                    version=version,
                    hooks=(),
                    tools=(),
                    error=error,
                    traceback=self.load_tracebacks.get(name),
                )
            )
        return records


def _own_section(sections: Mapping[str, Any], plugin_name: str) -> Any:
    """A plugin's own section as it is handed over: its settings-class instance, else a
    read-only mapping (``{}`` when the configuration has none)."""
    section = sections.get(plugin_name)
    if section is None:
        return types.MappingProxyType({})
    if isinstance(section, Mapping):
        return types.MappingProxyType(dict(section))
    return section


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def make_plugin_manager(
    *, plugins: Iterable[object] = (), load_entry_points: bool = True
) -> PluginManager:
    """Build a manager with core's defaults, ``plugins``, and the installed entry points.

    ``NRLLM_LOAD_PLUGINS`` is read now, not at import: unset loads every entry point, an empty
    string none, otherwise a comma-separated list of entry-point names. A plugin whose import or
    registration fails is skipped and reported; the rest load.
    """
    pm = PluginManager()
    pm.register(_defaults, name=_CORE_PLUGIN)
    from nrllm_core import providers

    pm.register(providers, name=_PROVIDERS_PLUGIN)
    for plugin in plugins:
        pm.register(plugin, name=entry_point_name(plugin))
    if load_entry_points:
        _load_entry_points(pm, _allowed_names(os.environ.get("NRLLM_LOAD_PLUGINS")))
    return pm


def entry_point_name(plugin: object) -> str | None:
    """The name of the installed entry point that names ``plugin``'s module, if one does: a
    plugin registered by hand keeps the name (and so the settings section) it is installed
    under."""
    module = getattr(plugin, "__name__", None)
    if not isinstance(plugin, types.ModuleType) or module is None:
        return None
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.value == module:
            return ep.name
    return None


def _allowed_names(value: str | None) -> frozenset[str] | None:
    if value is None:
        return None
    return frozenset(n.strip() for n in value.split(",") if n.strip())


def _load_entry_points(pm: PluginManager, allowed: frozenset[str] | None) -> None:
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        if allowed is not None and ep.name not in allowed:
            continue
        if pm.has_plugin(ep.name) or pm.is_blocked(ep.name) or ep.name in pm.load_errors:
            continue
        if ep.dist is not None:
            pm.distributions[ep.name] = (ep.dist.name, ep.dist.version)
        try:
            plugin = ep.load()
            pm.register(plugin, name=ep.name)
            pm.check_pending()
        except Exception as exc:
            if pm.has_plugin(ep.name):
                pm.unregister(name=ep.name)
            pm.load_errors[ep.name] = f"{type(exc).__name__}: {exc}"
            pm.load_tracebacks[ep.name] = traceback.format_exc()
            logger().error("nrllm.plugin.load_failed", plugin=ep.name, exc_info=True)
            continue
        if not pm.get_hookcallers(plugin):
            # Functions named like hooks but not marked: pluggy registers the module silently.
            pm.unregister(name=ep.name)
            pm.load_errors[ep.name] = _NO_HOOKS
            logger().error("nrllm.plugin.load_failed", plugin=ep.name, error=_NO_HOOKS)


def _sink_call(
    direct: pluggy.HookImpl | None, caller: _Caller, argument: str
) -> Callable[[object], object]:
    """A sink's caller of one payload: its own function where pluggy is not needed."""
    if direct is None:
        return lambda payload: caller(**{argument: payload})
    function = direct.function
    return function if direct.argnames else lambda _payload: function()
