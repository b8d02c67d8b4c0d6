"""The host configuration (``nrllm.toml``): parsed, checked and frozen, or refused with the key.

tomllib, cattrs and the entry-point metadata load inside :func:`load_config`, never at import.
"""

from __future__ import annotations

import copy
import math
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, Literal, TypeVar, final

import attrs

from nrllm_core._config_structure import kind_name, listing, structure
from nrllm_core._identity import identity_refusal
from nrllm_core._policy import PolicyConfig
from nrllm_core._privacy import PrivacyLevel
from nrllm_core._provider_sections import (
    KnownKinds,
    ProviderKinds,
    frozen_kinds,
    kind_of,
    known_kinds,
    provider_problems,
)
from nrllm_core._values import Actor, TrustZone
from nrllm_core.log import logger

if TYPE_CHECKING:
    pass

__all__ = [
    "ActorConfig",
    "ApprovalsConfig",
    "ConfigError",
    "DefaultsConfig",
    "HostConfig",
    "PrivacyConfig",
    "ProviderConfig",
    "RunConfig",
    "SkillConfig",
    "StoreConfig",
    "ToolsConfig",
    "load_config",
]

_CONFIG_ENV: Final = "NRLLM_CONFIG"
_DEFAULT_FILE: Final = "nrllm.toml"
_ENTRY_POINT_GROUP: Final = "nrllm"
_ENFORCEMENT_KEY: Final = "data_class_enforcement"
# Keys (compared without case, "_" or "-") that would let configuration move a tool's class.
_RELABEL_KEYS: Final = frozenset(
    {
        "class",
        "classes",
        "dataclass",
        "dataclasses",
        "effect",
        "effects",
        "group",
        "groups",
        "override",
        "overrides",
        "relabel",
        "relabels",
    }
)


T = TypeVar("T")


class ConfigError(ValueError):
    """The configuration cannot be used; the message names the key and what it accepts."""


Enforcement = Literal["enforce", "observe"]


@final
@attrs.frozen(kw_only=True)
class ToolsConfig:
    """``[tools]``: the enforcement mode and the global switches."""

    data_class_enforcement: Enforcement = "enforce"
    enabled: tuple[str, ...] = ()
    disabled: tuple[str, ...] = ()
    disabled_groups: tuple[str, ...] = ()

    @property
    def observing(self) -> bool:
        return self.data_class_enforcement == "observe"


def _frozen_copy(value: Mapping[str, Any]) -> Mapping[str, Any]:
    # A copy, so the caller's dict cannot change the settings after the load.
    return MappingProxyType(copy.deepcopy(dict(value)))


@final
@attrs.frozen(kw_only=True)
class ProviderConfig:
    """``[providers.NAME]``: a model provider, its trust zone and where it falls back to."""

    kind: str
    trust_zone: TrustZone = TrustZone.EXTERNAL_GLOBAL
    fallback: tuple[str, ...] = ()
    four_eyes: bool = False
    model: str | None = None
    base_url: str | None = None
    # The name of the environment variable holding the key: the key never sits in the file.
    api_key_env: str | None = None
    script: str | None = None
    timeout_seconds: float = 60.0
    max_retries: int = 2
    temperature: float | None = None
    max_tokens: int | None = None
    # OpenAI's successor of max_tokens (o-series models take only this one).
    max_completion_tokens: int | None = None
    # Extra request fields, sent as they are (JSON values).
    params: Mapping[str, Any] = attrs.field(factory=dict, converter=_frozen_copy)
    # The keys of the kind's own (``ProviderRegistry.register(settings=...)``), as an
    # instance of its settings class; never a key of the file itself.
    options: Any = None

    def section(self) -> dict[str, Any]:
        """The section as its kind's factory and check get it: every key, the kind's own
        settings under ``options``, typed."""
        plain = attrs.asdict(self, filter=lambda field, _: field.name != "options")
        return {**plain, "options": self.options}


@final
@attrs.frozen(kw_only=True)
class SkillConfig:
    """``[skills.NAME]``: the tools a run with this skill may be offered."""

    allowed_tools: tuple[str, ...] = ()
    enabled: bool = True
    four_eyes: bool = False


@final
@attrs.frozen(kw_only=True)
class ActorConfig:
    """``[actor]``: the person the command line acts for."""

    id: str
    admin: bool = False
    permissions: tuple[str, ...] = ()


@final
@attrs.frozen(kw_only=True)
class DefaultsConfig:
    """``[defaults]``: what a command uses when it names nothing."""

    provider: str | None = None


@final
@attrs.frozen(kw_only=True)
class PrivacyConfig:
    """``[privacy]``: how much of a run the audit keeps, and for how long."""

    level: PrivacyLevel = PrivacyLevel.METADATA
    retention_days: int = 30

    @property
    def keeps_content(self) -> bool:
        """Whether the level keeps what was said (masked at ``redacted``), not only its shape."""
        return self.level in (PrivacyLevel.REDACTED, PrivacyLevel.FULL)


@final
@attrs.frozen(kw_only=True)
class StoreConfig:
    """``[store]``: where runs are persisted; no URL means the embedded SQLite database."""

    url: str | None = None
    lease_seconds: int = 60
    unfinished_retention_days: int = 7


# Rounds of one run: the default, the cap a run's request is clamped to, and the hard limit
# no configured cap may pass (a model reading one record a turn needs tens of rounds; past a
# few hundred a run is a loop, not a task).
MAX_ROUNDS_DEFAULT: Final = 5
MAX_ROUNDS_CAP: Final = 20
MAX_ROUNDS_LIMIT: Final = 200


@final
@attrs.frozen(kw_only=True)
class RunConfig:
    """``[run]``: a run's rounds, and the bounds of one model turn, applied before the
    approval scan."""

    # The rounds of a run that names none, and the most a run may ask for (it is clamped).
    max_rounds: int = MAX_ROUNDS_DEFAULT
    max_rounds_cap: int = MAX_ROUNDS_CAP

    max_tool_calls_per_turn: int = 32
    # Of each call's arguments, as canonical JSON.
    max_argument_bytes: int = 100_000
    # Calls of one turn that run at once (1: one after another, in the model's order).
    max_parallel_tools: int = 8
    # A call still running after this long is answered as timed out; the others go on.
    tool_timeout_seconds: float = 60.0
    # Worker threads the async driver lends to sync tools.
    tool_threads: int = 16


APPROVAL_TTL_MIN_SECONDS: Final = 60


@final
@attrs.frozen(kw_only=True)
class ApprovalsConfig:
    """``[approvals]``: how long a suspended turn can still be decided."""

    ttl_seconds: int = 7 * 24 * 3600


@final
@attrs.frozen(kw_only=True)
class _Document:
    """The core sections exactly as the file spells them; the structuring target."""

    tools: ToolsConfig = ToolsConfig()
    providers: dict[str, ProviderConfig] = attrs.field(factory=dict)
    skills: dict[str, SkillConfig] = attrs.field(factory=dict)
    actor: ActorConfig | None = None
    defaults: DefaultsConfig = DefaultsConfig()
    privacy: PrivacyConfig = PrivacyConfig()
    store: StoreConfig = StoreConfig()
    run: RunConfig = RunConfig()
    approvals: ApprovalsConfig = ApprovalsConfig()
    policy: PolicyConfig = attrs.field(factory=PolicyConfig)


_CORE_SECTIONS: Final = frozenset(a.name for a in attrs.fields(_Document))


@final
@attrs.frozen(kw_only=True)
class HostConfig:
    """The resolved configuration of one host."""

    tools: ToolsConfig = ToolsConfig()
    providers: Mapping[str, ProviderConfig] = attrs.field(factory=lambda: MappingProxyType({}))
    skills: Mapping[str, SkillConfig] = attrs.field(factory=lambda: MappingProxyType({}))
    actor_config: ActorConfig | None = None
    defaults: DefaultsConfig = DefaultsConfig()
    privacy: PrivacyConfig = PrivacyConfig()
    store: StoreConfig = StoreConfig()
    run: RunConfig = RunConfig()
    approvals: ApprovalsConfig = ApprovalsConfig()
    policy: PolicyConfig = attrs.field(factory=PolicyConfig)
    # Each plugin's section by its name: an instance of its settings class, else a read-only
    # mapping.
    plugin_settings: Mapping[str, Any] = attrs.field(factory=lambda: MappingProxyType({}))
    # The file's folder, against which relative paths in the file resolve.
    config_dir: Path | None = None
    source: Path | None = None

    def actor(self) -> Actor:
        """The ``[actor]`` section, else the operating-system user: no admin, no permissions."""
        if self.actor_config is None:
            import getpass

            return Actor(id=getpass.getuser())
        return Actor(
            id=self.actor_config.id,
            admin=self.actor_config.admin,
            permissions=self.actor_config.permissions,
        )

    def four_eyes(self, provider: str | None, skill: str | None) -> bool:
        """Whether an approval in a run on ``provider`` with ``skill`` needs a second person:
        ``four_eyes`` on either section. A name not configured sets nothing."""
        on_provider = self.providers.get(provider or "")
        on_skill = self.skills.get(skill or "")
        return bool((on_provider and on_provider.four_eyes) or (on_skill and on_skill.four_eyes))

    def zone_for(self, provider: str | None) -> TrustZone:
        """The least trusted zone a run on ``provider`` can reach through its fallback chain.

        No provider, or a name not configured, is the strictest zone.
        """
        if provider is None:
            return TrustZone.EXTERNAL_GLOBAL
        seen: set[str] = set()
        pending = [provider]
        zone = TrustZone.LOCAL
        while pending:
            name = pending.pop()
            if name in seen:
                continue
            seen.add(name)
            settings = self.providers.get(name)
            if settings is None:
                return TrustZone.EXTERNAL_GLOBAL
            zone = max(zone, settings.trust_zone)
            pending.extend(settings.fallback)
        return zone


def load_config(
    path: str | os.PathLike[str] | None = None,
    *,
    data: Mapping[str, Any] | None = None,
    plugin_sections: Iterable[str] = (),
    settings_classes: Mapping[str, type[Any]] | None = None,
    provider_kinds: ProviderKinds | None = None,
) -> HostConfig:
    """Read and check the configuration.

    ``data`` is the configuration as a dict (no file is read). Otherwise the file is ``path``,
    else ``$NRLLM_CONFIG``, else ``./nrllm.toml`` if it exists, else nothing: every default.
    A top-level table not known to core is a plugin's section, allowed when an entry point of
    the group ``nrllm``, ``plugin_sections`` or ``settings_classes`` has its name. A section
    with a class in ``settings_classes`` (a plugin's ``nrllm_settings_class``) is structured
    and checked with it, and absent, is the class's defaults; any other section is kept as a
    read-only mapping. With ``provider_kinds`` (the installed plugins' kinds, each with the
    check its sections must pass, as ``ProviderRegistry.registered`` gives them), a provider of
    another kind is refused too; without, core's own kinds' checks apply. Each section passes
    its kind's check here (a ``scripted`` provider's script is read).
    Every problem of the load is reported in one :class:`ConfigError`.
    """
    source: Path | None = None
    if data is None:
        source = _locate(path)
        raw: Mapping[str, Any] = _read(source) if source is not None else {}
    else:
        raw = data
    if not isinstance(raw, Mapping):
        raise ConfigError(f"the configuration must be a table, not {type(raw).__name__}")
    named = _unnamed_key(raw, "")
    if named is not None:
        raise ConfigError(f"{named}: a key that is not text")
    kinds = None if provider_kinds is None else known_kinds(provider_kinds)
    return _build(raw, source, frozenset(plugin_sections), settings_classes or {}, kinds)


def config_loader(
    path: str | os.PathLike[str] | None = None,
    *,
    data: Mapping[str, Any] | None = None,
    plugin_sections: Callable[[], Iterable[str]] = tuple,
    settings_classes: Callable[[], Mapping[str, type[Any]]] = dict,
    provider_kinds: Callable[[], ProviderKinds] | None = None,
) -> Callable[[], HostConfig]:
    """A function that returns the live configuration, reading the file again only when it
    changed (its path, size or modification time) or the plugins did (``plugin_sections``,
    ``settings_classes`` and ``provider_kinds`` are asked on every call), so a host can ask on
    every tool call."""
    last: list[tuple[object, HostConfig]] = []

    def load() -> HostConfig:
        sections = frozenset(plugin_sections())
        classes = dict(settings_classes())
        kinds = None if provider_kinds is None else known_kinds(provider_kinds())
        if data is not None:
            key: object = ("data", sections, classes, frozen_kinds(kinds))
            if not last or last[0][0] != key:
                config = load_config(
                    data=data,
                    plugin_sections=sections,
                    settings_classes=classes,
                    provider_kinds=kinds,
                )
                last[:] = [(key, config)]
            return last[0][1]
        source = _locate(path)
        if source is None and last and last[0][1].source is not None:
            # A file that was there and is gone is not "no configuration": every default
            # would drop the switches and four-eyes rules it held. Refuse instead.
            raise ConfigError(
                "the configuration file is gone; nothing is permitted until it is back"
            )
        try:
            stat = None if source is None else source.stat()
        except OSError:
            stat = None
        key = (
            source,
            None if stat is None else (stat.st_mtime_ns, stat.st_size, stat.st_ino),
            sections,
            classes,
            frozen_kinds(kinds),
        )
        if last and last[0][0] == key:
            return last[0][1]
        config = load_config(
            path, plugin_sections=sections, settings_classes=classes, provider_kinds=kinds
        )
        last[:] = [(key, config)]
        return config

    return load


def _locate(path: str | os.PathLike[str] | None) -> Path | None:
    if path is not None:
        return Path(path)
    from_env = os.environ.get(_CONFIG_ENV)
    if from_env:
        return Path(from_env)
    default = Path(_DEFAULT_FILE)
    return default if default.is_file() else None


# No bound is infinite: past these a date, a timer or a thread pool overflows, and no real
# configuration comes near them.
MOST_DAYS: Final = 36_500
_MOST_SECONDS: Final = 315_360_000
_MOST_COUNT: Final = 1_000_000_000


def _read(source: Path) -> dict[str, Any]:
    import tomllib

    try:
        text = source.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read the configuration ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{source}: the configuration is not UTF-8 text") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: not valid TOML: {exc}") from None
    except RecursionError:
        # tomllib has no depth limit of its own.
        raise ConfigError(f"{source}: not valid TOML: nested too deeply") from None


def _build(
    raw: Mapping[str, Any],
    source: Path | None,
    extra_sections: frozenset[str],
    settings_classes: Mapping[str, type[Any]],
    provider_kinds: KnownKinds | None,
) -> HostConfig:
    core: dict[str, Any] = {}
    plugins: dict[str, Any] = {}
    errors: list[str] = []
    plugin_names: frozenset[str] | None = None
    for key, value in raw.items():
        if key in _CORE_SECTIONS:
            if isinstance(value, Mapping):
                core[key] = value
            else:
                errors.append(f"{key}: expected a table, got {kind_name(value)}")
            continue
        if key in settings_classes:
            continue
        if not isinstance(value, Mapping):
            errors.append(f"{key}: unknown key; accepted: {listing(_CORE_SECTIONS)}")
            continue
        if plugin_names is None:
            plugin_names = _installed_plugin_names() | extra_sections
        if key in plugin_names:
            # A copy, so the caller's dict cannot change the settings after the load.
            plugins[key] = MappingProxyType(copy.deepcopy(dict(value)))
        else:
            errors.append(
                f"{key}: unknown section; a plugin's section must be named after its "
                f'entry point in the group "{_ENTRY_POINT_GROUP}"'
            )
    for name, cls in sorted(settings_classes.items()):
        typed = structure(raw.get(name, {}), cls, name, errors)
        if typed is not None:
            plugins[name] = typed
    if "tools" in core:
        errors.extend(_relabel_attempts(core["tools"], "tools"))
        core["tools"] = _normalize_enforcement(core["tools"])
    options: dict[str, Any] = {}
    if isinstance(core.get("providers"), Mapping):
        core["providers"], options = _kind_settings(core["providers"], provider_kinds, errors)
    document = structure(core, _Document, "", errors)
    config_dir = source.resolve().parent if source is not None else None
    if document is not None:
        # Each section with its kind's own settings: its kind's check sees what its factory will.
        providers = {
            name: attrs.evolve(provider, options=options.get(name))
            for name, provider in document.providers.items()
        }
        document = attrs.evolve(document, providers=providers)
        errors.extend(_cross_checks(document, provider_kinds, config_dir))
    if errors or document is None:
        raise ConfigError(_summary(source, errors))
    return HostConfig(
        tools=document.tools,
        providers=MappingProxyType(dict(document.providers)),
        skills=MappingProxyType(dict(document.skills)),
        actor_config=document.actor,
        defaults=document.defaults,
        privacy=document.privacy,
        store=document.store,
        run=document.run,
        approvals=document.approvals,
        policy=document.policy,
        plugin_settings=MappingProxyType(plugins),
        config_dir=config_dir,
        source=source,
    )


def _installed_plugin_names() -> frozenset[str]:
    # Metadata only: a plugin's code is never imported to check its section's name.
    from importlib.metadata import entry_points

    return frozenset(ep.name for ep in entry_points(group=_ENTRY_POINT_GROUP))


def _relabel_attempts(value: object, path: str) -> list[str]:
    if not isinstance(value, Mapping):
        return []
    found = []
    for key, inner in value.items():
        where = f"{path}.{key}"
        folded = str(key).lower().replace("_", "").replace("-", "")
        if key != _ENFORCEMENT_KEY and (
            folded in _RELABEL_KEYS or folded.startswith("dataclass") or "relabel" in folded
        ):
            found.append(
                f"{where}: refused: data classes and effects are properties of the tool's "
                "code, and configuration cannot relabel a tool"
            )
        else:
            found.extend(_relabel_attempts(inner, where))
    return found


def _normalize_enforcement(tools: Mapping[str, Any]) -> dict[str, Any]:
    """Only a literal ``observe`` observes; anything else enforces, so a typo fails closed."""
    out = dict(tools)
    if _ENFORCEMENT_KEY not in out:
        return out
    value = out[_ENFORCEMENT_KEY]
    folded = value.strip().lower() if isinstance(value, str) else None
    if folded not in ("enforce", "observe"):
        logger().warning(
            "nrllm.config.enforcement_unrecognized",
            key=f"tools.{_ENFORCEMENT_KEY}",
            accepted=["enforce", "observe"],
            applied="enforce",
        )
    out[_ENFORCEMENT_KEY] = "observe" if folded == "observe" else "enforce"
    return out


def _cross_checks(
    document: _Document,
    provider_kinds: KnownKinds | None,
    config_dir: Path | None,
) -> list[str]:
    errors = []
    for name, provider in document.providers.items():
        errors.extend(provider_problems(name, provider.section(), provider_kinds, config_dir))
        for index, target in enumerate(provider.fallback):
            if target not in document.providers:
                errors.append(
                    f"providers.{name}.fallback[{index}]: no provider named {target!r} "
                    f"(configured: {listing(document.providers)})"
                )
        # Written so that NaN fails too.
        if not provider.timeout_seconds > 0:
            errors.append(f"providers.{name}.timeout_seconds: must be greater than 0")
        elif not provider.timeout_seconds <= 3600:
            errors.append(f"providers.{name}.timeout_seconds: must be at most 3,600")
        if provider.max_retries < 0:
            errors.append(f"providers.{name}.max_retries: must be 0 or more")
        elif provider.max_retries > 100:
            errors.append(f"providers.{name}.max_retries: must be at most 100")
        if provider.temperature is not None and not math.isfinite(provider.temperature):
            errors.append(f"providers.{name}.temperature: must be a finite number")
    wanted = document.defaults.provider
    if wanted is not None and wanted not in document.providers:
        errors.append(
            f"defaults.provider: no provider named {wanted!r} "
            f"(configured: {listing(document.providers)})"
        )
    for key, number, most in (
        ("privacy.retention_days", document.privacy.retention_days, MOST_DAYS),
        ("store.lease_seconds", document.store.lease_seconds, _MOST_SECONDS),
        ("store.unfinished_retention_days", document.store.unfinished_retention_days, MOST_DAYS),
        ("run.max_tool_calls_per_turn", document.run.max_tool_calls_per_turn, _MOST_COUNT),
        ("run.max_argument_bytes", document.run.max_argument_bytes, _MOST_COUNT),
        ("run.max_parallel_tools", document.run.max_parallel_tools, _MOST_COUNT),
        ("run.tool_timeout_seconds", document.run.tool_timeout_seconds, _MOST_SECONDS),
        ("run.tool_threads", document.run.tool_threads, _MOST_COUNT),
    ):
        # Written so that NaN fails too.
        if not number > 0:
            errors.append(f"{key}: must be greater than 0")
        elif not number <= most:
            errors.append(f"{key}: must be at most {most:,}")
    rounds, cap = document.run.max_rounds, document.run.max_rounds_cap
    if not 1 <= cap <= MAX_ROUNDS_LIMIT:
        errors.append(f"run.max_rounds_cap: must be from 1 to {MAX_ROUNDS_LIMIT}")
    elif not 1 <= rounds <= cap:
        errors.append(f"run.max_rounds: must be from 1 to run.max_rounds_cap ({cap})")
    if document.store.url is not None and not _readable_url(document.store.url):
        # Never quoted: a database URL may hold its password.
        errors.append("store.url: not a database URL (scheme://[user[:password]@]host[:port]/db)")
    if document.approvals.ttl_seconds < APPROVAL_TTL_MIN_SECONDS:
        errors.append(f"approvals.ttl_seconds: must be at least {APPROVAL_TTL_MIN_SECONDS}")
    elif document.approvals.ttl_seconds > _MOST_SECONDS:
        errors.append(f"approvals.ttl_seconds: must be at most {_MOST_SECONDS:,}")
    refusal = None if document.actor is None else identity_refusal(document.actor.id)
    if refusal is not None:
        errors.append(f"actor.id: refused: {refusal}; identities are compared as they read")
    return errors


def _unnamed_key(value: object, path: str, depth: int = 0) -> str | None:
    """Where ``value`` has a key that is not a string (a dict handed in as ``data`` may; a
    TOML file cannot), or ``None``."""
    if depth > 64:
        return None
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                return path or "(top level)"
            found = _unnamed_key(item, f"{path}.{key}" if path else key, depth + 1)
            if found is not None:
                return found
    elif isinstance(value, list | tuple):
        for item in value:
            found = _unnamed_key(item, path, depth + 1)
            if found is not None:
                return found
    return None


def _readable_url(url: str) -> bool:
    """Whether ``url`` parses as a URL with a scheme and, if it names one, a port: what the
    database driver would otherwise refuse with a traceback on every command."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises for a port that is no number
    except ValueError:
        return False
    return bool(parts.scheme)


def _kind_settings(
    sections: Mapping[str, Any], kinds: KnownKinds | None, errors: list[str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Each provider section without the keys its kind takes beyond core's, and those keys
    structured into the kind's settings class, by section name. ``options`` is never a key
    of the file: it is where the structured settings go."""
    core_keys = frozenset(a.name for a in attrs.fields(ProviderConfig))
    stripped: dict[str, Any] = {}
    typed: dict[str, Any] = {}
    for name, section in sections.items():
        stripped[name] = section
        if not isinstance(section, Mapping):
            continue
        if "options" in section:
            errors.append(f"providers.{name}.options: unknown key")
            stripped[name] = {k: v for k, v in section.items() if k != "options"}
        registered = kind_of(kinds, section.get("kind"))
        cls = None if registered is None else registered.settings
        if cls is None:
            continue
        own = frozenset(a.name for a in attrs.fields(cls))
        if own & core_keys:
            errors.append(
                f'providers.{name}: the settings of kind "{section["kind"]}" name keys core '
                f"has already ({listing(own & core_keys)})"
            )
            continue
        stripped[name] = {k: v for k, v in stripped[name].items() if k not in own}
        given = {k: v for k, v in section.items() if k in own}
        value = structure(given, cls, f"providers.{name}", errors)
        if value is not None:
            typed[name] = value
    return stripped, typed


def _summary(source: Path | None, errors: list[str]) -> str:
    where = f"{source}: " if source is not None else ""
    return where + "; ".join(errors)
