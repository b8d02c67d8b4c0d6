"""The governance commands: the tools a run would be offered, and the configuration."""

from __future__ import annotations

from typing import Any, Final

import attrs
import click

from nrllm_core._catalog import RegisteredTool
from nrllm_core._config import HostConfig
from nrllm_core._gate import GateDecision, decide
from nrllm_core._identity import identity_lookalike
from nrllm_core._serde import to_json
from nrllm_core.cli import _common, _main
from nrllm_core.cli._common import BadInput, host_config
from nrllm_core.cli._terminal import echo, echo_json
from nrllm_core.providers._settings import Settings, plain


def require_names(config: HostConfig, *, provider: str | None, skill: str | None) -> None:
    """Refuse a ``--provider`` or ``--skill`` the configuration does not define."""
    if provider is not None and provider not in config.providers:
        known = ", ".join(sorted(config.providers)) or "none"
        raise BadInput(f'no provider named "{provider}" is configured (configured: {known})')
    if skill is not None and skill not in config.skills:
        known = ", ".join(sorted(config.skills)) or "none"
        raise BadInput(f'no skill named "{skill}" is configured (configured: {known})')


@_main.cli.command()
@click.option("--provider", default=None, help="Decide for this provider (default: [defaults]).")
@click.option("--skill", default=None, help="Narrow to this skill's tools.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def tools(ctx: click.Context, provider: str | None, skill: str | None, as_json: bool) -> None:
    """List every registered tool and whether a run would be offered it."""
    config = host_config(ctx)
    require_names(config, provider=provider, skill=skill)
    catalog = _common.plugin_manager().catalog()
    kinds = _common.plugin_manager().provider_registry().registered
    report = decide(
        catalog, config, provider=provider, skill=skill, actor=config.actor(), kinds=kinds
    )
    rows = [_tool_row(catalog.tools[d.tool], d) for d in report.decisions]
    rows.extend(_withheld_row(name, "withheld", None) for name in sorted(catalog.clashes))
    rows.extend(
        _withheld_row(w.name, w.reason, w.detail) for _, w in sorted(catalog.withheld.items())
    )
    if as_json:
        echo_json(
            {
                "provider": report.provider,
                "zone": report.zone.value,
                "ceiling": report.ceiling.value,
                "skill": report.skill,
                "tools": rows,
            }
        )
        return
    echo(
        f"provider: {report.provider or '(none)'}  zone: {report.zone.value}  "
        f"ceiling: {report.ceiling.value}  skill: {report.skill or '(none)'}"
    )
    table = [("TOOL", "GROUP", "DATA CLASS", "SOURCE", "EFFECT", "APPROVAL", "OFFERED")]
    for row in rows:
        verdict = "yes" if row["offered"] else f"no: {row['reason']}"
        if row["detail"]:
            verdict = f"{verdict} ({row['detail']})"
        if row["observed"]:
            verdict = f"yes (observed: {row['observed']})"
        table.append(
            (
                row["name"],
                row["group"],
                row["data_class"],
                row["data_class_source"],
                row["effect"],
                "required" if row["requires_approval"] else "-",
                verdict,
            )
        )
    widths = [max(len(line[column]) for line in table) for column in range(len(table[0]))]
    for line in table:
        cells = (cell.ljust(width) for cell, width in zip(line, widths, strict=True))
        echo("  ".join(cells).rstrip())


def _tool_row(tool: RegisteredTool, decision: GateDecision) -> dict[str, Any]:
    return {
        "name": tool.name,
        "group": tool.group,
        "data_class": decision.data_class.value,
        "data_class_source": decision.data_class_source,
        "effect": tool.effect.value,
        "requires_approval": tool.requires_approval,
        "offered": decision.offered,
        "reason": None if decision.reason is None else decision.reason.value,
        "detail": decision.detail,
        "observed": None if decision.observed is None else decision.observed.value,
    }


def _withheld_row(name: str, reason: str, detail: str | None) -> dict[str, Any]:
    """A name no run is offered: one two plugins registered (``nrllm plugins`` says whose), or
    one its plugin withholds (``ToolRegistry.withhold``), with the plugin's reason and its
    detail."""
    return {
        "name": name,
        "group": "-",
        "data_class": "-",
        "data_class_source": "-",
        "effect": "-",
        "requires_approval": False,
        "offered": False,
        "reason": reason,
        "detail": detail,
        "observed": None,
    }


@_main.cli.group()
def config() -> None:
    """Inspect the host configuration."""


@config.command()
@click.pass_context
def check(ctx: click.Context) -> None:
    """Validate the configuration and print what it resolved to."""
    settings = host_config(ctx)
    echo(f"configuration: {settings.source or '(no file: every default applies)'}")
    tools_settings = settings.tools
    echo(f"tools.data_class_enforcement: {tools_settings.data_class_enforcement}")
    echo(f"tools.enabled: {_names(tools_settings.enabled)}")
    echo(f"tools.disabled: {_names(tools_settings.disabled)}")
    echo(f"tools.disabled_groups: {_names(tools_settings.disabled_groups)}")
    for name, provider in sorted(settings.providers.items()):
        zone = settings.zone_for(name)
        echo(
            f"provider {name}: kind {provider.kind}, trust_zone {provider.trust_zone.value}, "
            f"fallback {_names(provider.fallback)}, run zone {zone.value} "
            f"(ceiling {zone.ceiling.value}), four_eyes {_yes(provider.four_eyes)}"
        )
        request = Settings(name, attrs.asdict(provider)).request_fields()
        echo(f"provider {name} request: {to_json(request) if request else '-'}")
        if provider.options is not None:
            own = plain(attrs.asdict(provider.options))
            echo(f"provider {name} {provider.kind} settings: {to_json(own)}")
        # The kind says where it sends, when it registered an endpoint (core's HTTP kinds do).
        kind = _common.plugin_manager().provider_registry().kind(provider.kind)
        endpoint = None if kind is None else kind.endpoint
        if endpoint is not None:
            url, variables = endpoint(name, provider.section())
            echo(f"provider {name} url: {_shown_url(url)}")
            # The names of the variables only: their values are never read here.
            read = ", ".join(f"{variable} ({header})" for variable, header in variables)
            echo(f"provider {name} environment: {read or '-'}")
    for name, skill in sorted(settings.skills.items()):
        echo(
            f"skill {name}: enabled {_yes(skill.enabled)}, "
            f"allowed_tools {_names(skill.allowed_tools)}, four_eyes {_yes(skill.four_eyes)}"
        )
    actor = settings.actor()
    source = "[actor]" if settings.actor_config is not None else "operating-system user"
    echo(
        f"actor: {actor.id} ({source}), admin {_yes(actor.admin)}, "
        f"permissions {_names(sorted(actor.permissions))}"
    )
    # Allowed, since only refusing checks fold look-alikes, but worth a word to whoever
    # configured it.
    lookalike = identity_lookalike(actor.id)
    if lookalike is not None:
        echo(f"note: actor.id: {lookalike}; four-eyes takes the two for one person")
    default = settings.defaults.provider
    zone = settings.zone_for(default)
    echo(
        f"defaults.provider: {default or '(none)'}, "
        f"zone {zone.value} (ceiling {zone.ceiling.value})"
    )
    privacy, store = settings.privacy, settings.store
    echo(f"privacy: level {privacy.level.value}, retention_days {privacy.retention_days}")
    echo(
        f"store: url {_shown_url(store.url)}, lease_seconds {store.lease_seconds}, "
        f"unfinished_retention_days {store.unfinished_retention_days}"
    )
    echo(f"plugin sections: {_names(sorted(settings.plugin_settings))}")


# Query parameters that hold a secret in the URLs people write: a database's password, an
# API's key or token, a signature.
_SECRET_PARAMETERS: Final = frozenset(
    {
        "password",
        "sslpassword",
        "key",
        "api_key",
        "api-key",
        "apikey",
        "token",
        "access_token",
        "secret",
        "sig",
        "signature",
    }
)


def _shown_url(url: str | None) -> str:
    """The store's or a provider's URL without its password, which has no business on a
    terminal."""
    if url is None:
        return "(embedded SQLite)"
    from urllib.parse import parse_qsl, urlencode, urlsplit

    try:
        parts = urlsplit(url)
    except ValueError:
        return "(a URL that does not parse)"
    # A query may carry a password too (libpq's ``password=``), or a key: those values masked.
    if parts.query:
        pairs = parse_qsl(parts.query, keep_blank_values=True)
        shown = [(k, "***" if k.lower() in _SECRET_PARAMETERS else v) for k, v in pairs]
        parts = parts._replace(query=urlencode(shown, safe="*"))
    if parts.password is not None:
        host = parts.netloc.rpartition("@")[2]
        parts = parts._replace(netloc=f"{parts.username}:***@{host}")
    return parts.geturl()


def _names(names: Any) -> str:
    return ", ".join(names) or "-"


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"
