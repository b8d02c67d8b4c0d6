"""The ``[mcp]`` section of ``nrllm.toml``: the MCP servers whose tools nrllm governs."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any, Final, final

import attrs

from nrllm_core import DataClass, Integrity

__all__ = [
    "SECTION",
    "McpSettings",
    "ServeActor",
    "ServeSettings",
    "ServerSettings",
    "SettingsError",
    "load_settings",
]

SECTION: Final = "mcp"
_SERVER_NAME: Final = re.compile(r"[A-Za-z0-9_-]{1,32}")
_ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class SettingsError(ValueError):
    """The section cannot be used; the message names the key and what it accepts."""


@final
@attrs.frozen(kw_only=True)
class ServerSettings:
    """``[mcp.servers.NAME]``: one server, reached over stdio (``command``) or HTTP (``url``)."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    # The child's whole environment, with PATH: nothing else of the host's reaches it.
    env: Mapping[str, str] = attrs.field(factory=dict)
    url: str | None = None
    # Header name to the environment variable holding its value: values never sit in the file.
    headers_env: Mapping[str, str] = attrs.field(factory=dict)
    timeout_seconds: float = 30.0
    # How long the server may take to start, answer the handshake and list its tools: past it,
    # only this server's tools are withheld.
    start_timeout_seconds: float = 30.0
    # A session unused this long is closed (its child stopped) and opened on the next use.
    idle_seconds: float = 300.0
    enabled: bool = True
    data_class: DataClass = DataClass.SECRET_ADJACENT
    # Who writes what its tools answer: untrusted unless the host says the server is its own.
    integrity: Integrity = Integrity.UNTRUSTED
    group: str = "mcp"
    read_only_tools: tuple[str, ...] = ()
    prefix: str = ""
    # The largest tool a model is offered: its name, description and input schema as offered.
    max_tool_bytes: int = 16_384
    # The provider the server may ask for a completion during a call (``None``: it may not),
    # within that provider's zone, for at most this many tokens and requests per call.
    sampling: str | None = None
    sampling_max_tokens: int = 1_024
    sampling_max_requests: int = 3
    # Whether the server may ask the person a question during a call.
    elicitation: bool = False
    # "oauth": an HTTP server's requests carry the token ``nrllm mcp login`` stored .
    auth: str | None = None
    # OAuth: a client registered beforehand (else registered dynamically at login), and the
    # scopes asked for (else those the server advertises).
    client_id: str | None = None
    scopes: tuple[str, ...] = ()
    # Folders offered to the server as its roots (``roots/list``), absolute paths; none: the
    # client declares no roots capability and refuses the request.
    roots: tuple[str, ...] = ()
    # Whether a model may read the server's listed resources, through one nrllm tool.
    resources: bool = False

    @property
    def transport(self) -> str:
        return "stdio" if self.command is not None else "http"

    @property
    def tool_prefix(self) -> str:
        return f"{self.prefix or self.name}__"


@final
@attrs.frozen(kw_only=True)
class ServeActor:
    """``[mcp.serve.actors]``: the nrllm actor a token's subject acts as."""

    name: str
    admin: bool = False
    permissions: tuple[str, ...] = ()


@final
@attrs.frozen(kw_only=True)
class ServeSettings:
    """``[mcp.serve]``: how ``nrllm mcp serve --transport http`` knows who calls.

    ``auth = "token"`` (the default): one static bearer token, for one local user, who acts as
    ``[actor]``. ``auth = "oauth"``: an OAuth 2.1 resource server; each access token is from
    ``issuer``, checked as a JWT against its ``jwks_url`` or by its ``introspection_url``
    (exactly one of the two), for the audience ``resource`` with ``required_scopes``, whose
    subject must be one of ``actors``."""

    auth: str = "token"
    issuer: str | None = None
    jwks_url: str | None = None
    introspection_url: str | None = None
    resource: str | None = None
    required_scopes: tuple[str, ...] = ()
    actors: Mapping[str, ServeActor] = attrs.field(factory=dict)


@final
@attrs.frozen(kw_only=True)
class McpSettings:
    servers: Mapping[str, ServerSettings] = attrs.field(factory=dict)
    serve: ServeSettings = ServeSettings()


_SERVER_KEYS: Final = frozenset(a.name for a in attrs.fields(ServerSettings)) - {"name"}


def load_settings(raw: object) -> McpSettings:
    """Check ``raw`` (the section as read, or ``{}``) and build the settings."""
    if not isinstance(raw, Mapping):
        raise SettingsError(f"{SECTION}: expected a table")
    unknown = sorted(str(key) for key in raw if key not in ("servers", "serve"))
    if unknown:
        raise SettingsError(f"{SECTION}.{unknown[0]}: unknown key; accepted: serve, servers")
    servers = raw.get("servers", {})
    if not isinstance(servers, Mapping):
        raise SettingsError(f"{SECTION}.servers: expected a table of servers")
    return McpSettings(
        servers={name: _server(name, value) for name, value in servers.items()},
        serve=_serve(raw.get("serve", {})),
    )


_SERVE_KEYS: Final = frozenset(a.name for a in attrs.fields(ServeSettings))
_OAUTH_URLS: Final = ("issuer", "resource")
# How a token is checked: as a JWT against the keys, or by asking the issuer (RFC 7662).
_TOKEN_CHECKS: Final = ("jwks_url", "introspection_url")
_SCOPE: Final = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]+")


def _serve(raw: object) -> ServeSettings:
    where = f"{SECTION}.serve"
    if not isinstance(raw, Mapping):
        raise SettingsError(f"{where}: expected a table")
    unknown = sorted(str(key) for key in raw if key not in _SERVE_KEYS)
    if unknown:
        raise SettingsError(
            f"{where}.{unknown[0]}: unknown key; accepted: {', '.join(sorted(_SERVE_KEYS))}"
        )
    auth = raw.get("auth", "token")
    if auth not in ("token", "oauth"):
        raise SettingsError(
            f"{where}.auth: {auth!r} is not accepted; accepted values: oauth, token"
        )
    if auth == "token":
        extra = sorted(str(key) for key in raw if key != "auth")
        if extra:
            raise SettingsError(f'{where}.{extra[0]}: only with auth = "oauth"')
        return ServeSettings()
    values: dict[str, Any] = {"auth": auth}
    for key in _OAUTH_URLS:
        if key not in raw:
            raise SettingsError(f'{where}.{key}: required with auth = "oauth"')
        values[key] = _oauth_url(raw[key], f"{where}.{key}")
    checks = [key for key in _TOKEN_CHECKS if key in raw]
    if len(checks) != 1:
        raise SettingsError(
            f"{where}: set exactly one of jwks_url (JWT access tokens) and introspection_url"
            ' (token introspection, RFC 7662) with auth = "oauth"'
        )
    values[checks[0]] = _oauth_url(raw[checks[0]], f"{where}.{checks[0]}")
    if "required_scopes" in raw:
        scopes = raw["required_scopes"]
        if not isinstance(scopes, list) or not all(
            isinstance(s, str) and _SCOPE.fullmatch(s) for s in scopes
        ):
            raise SettingsError(f"{where}.required_scopes: expected an array of OAuth scope names")
        values["required_scopes"] = tuple(scopes)
    # Without a mapped subject nobody could call: said now, not as a 403 to every person.
    actors = raw.get("actors")
    if not isinstance(actors, Mapping) or not actors:
        raise SettingsError(
            f'{where}.actors: required with auth = "oauth": a table of token subjects to'
            " {name = ..., admin = ..., permissions = [...]}"
        )
    values["actors"] = {
        str(subject): _serve_actor(spec, f"{where}.actors.{subject}")
        for subject, spec in actors.items()
    }
    return ServeSettings(**values)


def _oauth_url(value: object, where: str) -> str:
    """An https URL, or http on a loopback host (a test or a local authorization server):
    OAuth 2.1 sends tokens over TLS only."""
    from urllib.parse import urlsplit

    url = _string(value, where)
    try:
        parts = urlsplit(url)
        loopback = parts.hostname in ("127.0.0.1", "::1", "localhost")
    except ValueError:
        raise SettingsError(f"{where}: expected an https:// URL") from None
    if not parts.netloc or parts.query or parts.fragment:
        raise SettingsError(f"{where}: expected an https:// URL without a query or fragment")
    if parts.scheme != "https" and not (parts.scheme == "http" and loopback):
        raise SettingsError(f"{where}: expected an https:// URL (http:// only on loopback)")
    return url


def _serve_actor(raw: object, where: str) -> ServeActor:
    from nrllm_core import Actor

    if not isinstance(raw, Mapping):
        raise SettingsError(f"{where}: expected {{name = ..., admin = ..., permissions = [...]}}")
    unknown = sorted(str(key) for key in raw if key not in ("name", "admin", "permissions"))
    if unknown:
        raise SettingsError(
            f"{where}.{unknown[0]}: unknown key; accepted: admin, name, permissions"
        )
    name = _string(raw.get("name"), f"{where}.name")
    admin = raw.get("admin", False)
    if type(admin) is not bool:
        raise SettingsError(f"{where}.admin: expected a boolean")
    permissions = raw.get("permissions", [])
    if not isinstance(permissions, list) or not all(isinstance(p, str) for p in permissions):
        raise SettingsError(f"{where}.permissions: expected an array of strings")
    try:
        # The actor the calls run as: an id core refuses is refused here, at start.
        Actor(id=name, admin=admin, permissions=frozenset(permissions))
    except ValueError:
        raise SettingsError(f"{where}.name: {name!r} names nobody") from None
    return ServeActor(name=name, admin=admin, permissions=tuple(permissions))


def _server(name: object, raw: object) -> ServerSettings:
    where = f"{SECTION}.servers.{name}"
    if not isinstance(name, str) or not _SERVER_NAME.fullmatch(name):
        raise SettingsError(f"{where}: a server name must match ^[A-Za-z0-9_-]{{1,32}}$")
    if not isinstance(raw, Mapping):
        raise SettingsError(f"{where}: expected a table")
    unknown = sorted(str(key) for key in raw if key not in _SERVER_KEYS)
    if unknown:
        raise SettingsError(
            f"{where}.{unknown[0]}: unknown key; accepted: {', '.join(sorted(_SERVER_KEYS))}"
        )
    values: dict[str, Any] = {"name": name}
    for key in ("command", "url", "group", "prefix", "sampling"):
        if key in raw:
            values[key] = _string(raw[key], f"{where}.{key}")
    if ("command" in values) == ("url" in values):
        raise SettingsError(f"{where}: set exactly one of command (stdio) and url (HTTP)")
    if "=" in values.get("command", ""):
        # The child is started through ``env -i``, which reads NAME=VALUE words as variables.
        raise SettingsError(f"{where}.command: must not contain '='")
    url = values.get("url")
    if url is not None and not url.startswith(("http://", "https://")):
        raise SettingsError(f"{where}.url: expected an http:// or https:// URL")
    if "prefix" in values and not re.fullmatch(r"[A-Za-z0-9_-]{1,32}", values["prefix"]):
        raise SettingsError(f"{where}.prefix: expected ^[A-Za-z0-9_-]{{1,32}}$")
    _oauth_settings(raw, values, where)
    for key in ("args", "read_only_tools"):
        if key in raw:
            items = raw[key]
            if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
                raise SettingsError(f"{where}.{key}: expected an array of strings")
            values[key] = tuple(items)
    if "env" in raw:
        values["env"] = _string_table(raw["env"], f"{where}.env")
    if "headers_env" in raw:
        headers = _string_table(raw["headers_env"], f"{where}.headers_env")
        for header, variable in headers.items():
            if not _ENV_NAME.fullmatch(variable):
                raise SettingsError(
                    f"{where}.headers_env.{header}: expected the name of an environment variable"
                )
        values["headers_env"] = headers
    for key in ("timeout_seconds", "start_timeout_seconds"):
        if key in raw:
            values[key] = _seconds(raw[key], f"{where}.{key}", 600)
    if "idle_seconds" in raw:
        values["idle_seconds"] = _seconds(raw["idle_seconds"], f"{where}.idle_seconds", 86_400)
    if "max_tool_bytes" in raw:
        size = raw["max_tool_bytes"]
        if type(size) is not int or not 1_024 <= size <= 1_048_576:
            raise SettingsError(f"{where}.max_tool_bytes: expected an integer in [1024, 1048576]")
        values["max_tool_bytes"] = size
    for key in ("enabled", "elicitation", "resources"):
        if key in raw:
            if type(raw[key]) is not bool:
                raise SettingsError(f"{where}.{key}: expected a boolean")
            values[key] = raw[key]
    for key, most in (("sampling_max_tokens", 32_768), ("sampling_max_requests", 100)):
        if key in raw:
            if type(raw[key]) is not int or not 1 <= raw[key] <= most:
                raise SettingsError(f"{where}.{key}: expected an integer in [1, {most}]")
            values[key] = raw[key]
    if "roots" in raw:
        values["roots"] = _roots(raw["roots"], f"{where}.roots")
    if "data_class" in raw:
        classes = {member.value: member for member in DataClass}
        if raw["data_class"] not in classes:
            raise SettingsError(
                f"{where}.data_class: {raw['data_class']!r} is not accepted; accepted values: "
                + ", ".join(classes)
            )
        values["data_class"] = classes[raw["data_class"]]
    if "integrity" in raw:
        kinds = {member.value: member for member in Integrity}
        if raw["integrity"] not in kinds:
            raise SettingsError(
                f"{where}.integrity: {raw['integrity']!r} is not accepted; accepted values: "
                + ", ".join(kinds)
            )
        values["integrity"] = kinds[raw["integrity"]]
    return ServerSettings(**values)


def _oauth_settings(raw: Mapping[str, Any], values: dict[str, Any], where: str) -> None:
    if "auth" in raw:
        if raw["auth"] != "oauth":
            raise SettingsError(
                f"{where}.auth: {raw['auth']!r} is not accepted; accepted values: oauth"
            )
        if "url" not in values:
            raise SettingsError(f"{where}.auth: OAuth is for a url (HTTP) server only")
        values["auth"] = "oauth"
    for key in ("client_id", "scopes"):
        if key in raw and "auth" not in values:
            raise SettingsError(f'{where}.{key}: only with auth = "oauth"')
    if "client_id" in raw:
        values["client_id"] = _string(raw["client_id"], f"{where}.client_id")
    if "scopes" in raw:
        scopes = raw["scopes"]
        if not isinstance(scopes, list) or not all(
            isinstance(s, str) and re.fullmatch(r"[\x21\x23-\x5b\x5d-\x7e]+", s) for s in scopes
        ):
            raise SettingsError(f"{where}.scopes: expected an array of OAuth scope names")
        values["scopes"] = tuple(scopes)


def _roots(value: object, where: str) -> tuple[str, ...]:
    """Absolute paths, so a root does not depend on the folder a command runs in. Whether each
    is an existing folder is checked when the session opens: the configuration is read by
    every command, before a folder may exist, and the folder offered is the one found then."""
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise SettingsError(f"{where}: expected an array of absolute folder paths")
    for index, item in enumerate(value):
        if not os.path.isabs(item) or "\x00" in item:
            raise SettingsError(f"{where}[{index}]: expected an absolute folder path")
    return tuple(value)


def _seconds(value: object, where: str, most: int) -> float:
    # A boolean is an int to Python, not a number of seconds to an operator.
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= most:
        raise SettingsError(f"{where}: expected a number of seconds in (0, {most}]")
    return float(value)


def _string(value: object, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise SettingsError(f"{where}: expected a non-empty string")
    return value


def _string_table(value: object, where: str) -> dict[str, str]:
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise SettingsError(f"{where}: expected a table of strings")
    return dict(value)
