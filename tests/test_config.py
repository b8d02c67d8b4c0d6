"""Host configuration: discovery, strict structuring, refused relabels, fallback zones."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path
from typing import Any

import pytest
import structlog
from hypothesis import given
from hypothesis import strategies as st

from nrllm_core._config import ConfigError, HostConfig, load_config
from nrllm_core._privacy import PrivacyLevel
from nrllm_core._values import Actor, TrustZone

# -- discovery -----------------------------------------------------------------------------------


@pytest.fixture
def no_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.delenv("NRLLM_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_no_file_anywhere_gives_every_default(no_env: Path) -> None:
    config = load_config()
    assert config.source is None
    assert config.config_dir is None
    assert config.tools.data_class_enforcement == "enforce"
    assert config.providers == {}
    assert config.privacy.level is PrivacyLevel.METADATA
    assert config.privacy.retention_days == 30
    assert config.store.url is None
    assert config.store.lease_seconds == 60
    assert config.store.unfinished_retention_days == 7


def test_the_working_directory_file_is_found(no_env: Path) -> None:
    write(no_env / "nrllm.toml", '[providers.p]\nkind = "x"\n')
    config = load_config()
    assert list(config.providers) == ["p"]
    assert config.config_dir == no_env.resolve()


def test_the_environment_variable_wins_over_the_working_directory(
    no_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(no_env / "nrllm.toml", '[providers.cwd]\nkind = "x"\n')
    elsewhere = no_env / "sub"
    elsewhere.mkdir()
    monkeypatch.setenv(
        "NRLLM_CONFIG", str(write(elsewhere / "c.toml", '[providers.env]\nkind = "x"\n'))
    )
    config = load_config()
    assert list(config.providers) == ["env"]
    assert config.config_dir == elsewhere.resolve()


def test_the_argument_wins_over_the_environment(
    no_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        "NRLLM_CONFIG", str(write(no_env / "env.toml", '[providers.env]\nkind = "x"\n'))
    )
    config = load_config(write(no_env / "arg.toml", '[providers.arg]\nkind = "x"\n'))
    assert list(config.providers) == ["arg"]


def test_a_named_file_that_is_missing_is_an_error(no_env: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(no_env / "absent.toml")


def test_invalid_toml_is_an_error_naming_the_file(no_env: Path) -> None:
    path = write(no_env / "bad.toml", "[tools\n")
    with pytest.raises(ConfigError, match=r"bad\.toml: not valid TOML"):
        load_config(path)


def test_a_dict_is_accepted_without_reading_any_file(no_env: Path) -> None:
    write(no_env / "nrllm.toml", "this is not toml")
    config = load_config(data={"providers": {"p": {"kind": "x"}}})
    assert list(config.providers) == ["p"]


def test_data_that_is_not_a_table_is_refused() -> None:
    with pytest.raises(ConfigError, match="must be a table"):
        load_config(data=["providers"])  # type: ignore[arg-type]


# -- enforcement: only a literal observe observes -----------------------------------------------


@pytest.mark.parametrize("value", ["observe", " OBSERVE ", "Observe\n", "\tobServe"])
def test_observe_in_any_case_and_spacing_observes(value: str) -> None:
    with structlog.testing.capture_logs() as logs:
        config = load_config(data={"tools": {"data_class_enforcement": value}})
    assert config.tools.observing
    assert config.tools.data_class_enforcement == "observe"
    assert logs == []


@pytest.mark.parametrize("value", ["enforce", " Enforce "])
def test_enforce_enforces_without_a_warning(value: str) -> None:
    with structlog.testing.capture_logs() as logs:
        config = load_config(data={"tools": {"data_class_enforcement": value}})
    assert not config.tools.observing
    assert logs == []


@pytest.mark.parametrize("value", ["", "observ", "off", "yes", "warn", "observe!", 1, True, ["x"]])
def test_any_other_value_enforces_and_warns(value: object) -> None:
    with structlog.testing.capture_logs() as logs:
        config = load_config(data={"tools": {"data_class_enforcement": value}})
    assert config.tools.data_class_enforcement == "enforce"
    assert not config.tools.observing
    assert [e["event"] for e in logs] == ["nrllm.config.enforcement_unrecognized"]
    assert logs[0]["log_level"] == "warning"
    assert logs[0]["applied"] == "enforce"


def test_enforcement_defaults_to_enforce() -> None:
    assert load_config(data={"tools": {}}).tools.data_class_enforcement == "enforce"


# -- relabelling is refused ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tools", "key"),
    [
        ({"data_class": "publicContent"}, "tools.data_class"),
        ({"dataClass": "publicContent"}, "tools.dataClass"),
        ({"data_classes": {"get_env": "publicContent"}}, "tools.data_classes"),
        ({"class": "publicContent"}, "tools.class"),
        ({"effect": "read_only"}, "tools.effect"),
        ({"group": "rag"}, "tools.group"),
        ({"overrides": {"get_env": {"x": 1}}}, "tools.overrides"),
        ({"relabel": {"get_env": "publicContent"}}, "tools.relabel"),
        ({"get_env": {"data_class": "publicContent"}}, "tools.get_env.data_class"),
        ({"get_env": {"effect": "read_only"}}, "tools.get_env.effect"),
        ({"x": {"y": {"group": "rag"}}}, "tools.x.y.group"),
    ],
)
def test_configuration_cannot_relabel_a_tool(tools: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(data={"tools": tools})
    message = str(caught.value)
    assert f"{key}: refused" in message
    assert "data classes and effects are properties of the tool's code" in message


# -- strict structuring: every mistake names its key --------------------------------------------


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"tools": {"enabled": "a"}}, "tools.enabled: expected an array of strings, got a string"),
        ({"tools": {"disabled": ["a", 1]}}, "tools.disabled: item 1: expected a string"),
        ({"tools": {"speed": 1}}, "tools.speed: unknown key; accepted:"),
        ({"tools": 3}, "tools: expected a table, got an integer"),
        ({"providers": {"p": {}}}, "providers.p.kind: required key missing"),
        ({"providers": {"p": "x"}}, "providers.p: expected a table, got a string"),
        ({"providers": {"p": {"kind": 1}}}, "providers.p.kind: expected a string, got an integer"),
        (
            {"providers": {"p": {"kind": "x", "four_eyes": "yes"}}},
            "providers.p.four_eyes: expected a boolean, got a string",
        ),
        (
            {"providers": {"p": {"kind": "x", "max_retries": "2"}}},
            "providers.p.max_retries: expected an integer, got a string",
        ),
        (
            {"providers": {"p": {"kind": "x", "max_retries": True}}},
            "providers.p.max_retries: expected an integer, got a boolean",
        ),
        (
            {"providers": {"p": {"kind": "x", "timeout_seconds": "1"}}},
            "providers.p.timeout_seconds: expected a number",
        ),
        (
            {"providers": {"p": {"kind": "x", "timeout_seconds": 0}}},
            "providers.p.timeout_seconds: must be greater than 0",
        ),
        (
            {"providers": {"p": {"kind": "x", "max_retries": -1}}},
            "providers.p.max_retries: must be 0 or more",
        ),
        (
            {"providers": {"p": {"kind": "x", "api_key": "sk-live"}}},
            "providers.p.api_key: unknown key",
        ),
        (
            {"providers": {"p": {"kind": "x", "fallback": ["q"]}}},
            "providers.p.fallback[0]: no provider named 'q'",
        ),
        ({"skills": {"s": {"allowed_tools": "a, b"}}}, "skills.s.allowed_tools: expected an array"),
        ({"skills": {"s": {"enabled": "true"}}}, "skills.s.enabled: expected a boolean"),
        ({"skills": {"s": {"enabled": 1}}}, "skills.s.enabled: expected a boolean, got an integer"),
        ({"skills": {"s": ["a"]}}, "skills.s: expected a table, got an array"),
        ({"skills": {"s": {"tools": ["a"]}}}, "skills.s.tools: unknown key"),
        ({"actor": {"admin": True}}, "actor.id: required key missing"),
        ({"actor": {"id": "ann", "admin": "yes"}}, "actor.admin: expected a boolean"),
        ({"actor": {"id": "ann", "permissions": "all"}}, "actor.permissions: expected an array"),
        ({"defaults": {"provider": "p"}}, "defaults.provider: no provider named 'p'"),
        ({"privacy": {"retention_days": 0}}, "privacy.retention_days: must be greater than 0"),
        ({"store": {"lease_seconds": 1.5}}, "store.lease_seconds: expected an integer"),
        ({"store": {"unfinished_retention_days": -1}}, "store.unfinished_retention_days: must be"),
        # Past these a date, a timer or a thread pool overflows later, far from the file.
        (
            {"store": {"lease_seconds": 9223372036854775807}},
            "store.lease_seconds: must be at most 315,360,000",
        ),
        ({"privacy": {"retention_days": 3_000_000}}, "privacy.retention_days: must be at most"),
        (
            {"store": {"unfinished_retention_days": 3_000_000}},
            "store.unfinished_retention_days: must be at most 36,500",
        ),
        ({"approvals": {"ttl_seconds": 300_000_000_000}}, "approvals.ttl_seconds: must be at most"),
        ({"run": {"tool_timeout_seconds": float("nan")}}, "run.tool_timeout_seconds: must be"),
        (
            {"providers": {"p": {"kind": "x", "timeout_seconds": float("nan")}}},
            "providers.p.timeout_seconds: must be greater than 0",
        ),
        (
            {"providers": {"p": {"kind": "x", "timeout_seconds": float("inf")}}},
            "providers.p.timeout_seconds: must be at most 3,600",
        ),
        (
            {"providers": {"p": {"kind": "x", "max_retries": 2**62}}},
            "providers.p.max_retries: must be at most 100",
        ),
        (
            {"providers": {"p": {"kind": "x", "temperature": float("nan")}}},
            "providers.p.temperature: must be a finite number",
        ),
        # A dict handed in may have keys no TOML file can.
        ({"tools": {1: 2}}, "tools: a key that is not text"),
        ({"verbose": True}, "verbose: unknown key; accepted: actor, approvals, defaults"),
        ({"acme": {"x": 1}}, "acme: unknown section; a plugin's section must be named after"),
    ],
)
def test_a_mistake_is_an_error_naming_the_key(data: dict[str, Any], expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(data=data)
    assert expected in str(caught.value)


@pytest.mark.parametrize(
    ("data", "key", "accepted"),
    [
        (
            {"providers": {"p": {"kind": "x", "trust_zone": "cloud"}}},
            "providers.p.trust_zone",
            "local, privateHosted, externalEu, externalGlobal",
        ),
        (
            {"providers": {"p": {"kind": "x", "trust_zone": "Local"}}},
            "providers.p.trust_zone",
            "local, privateHosted, externalEu, externalGlobal",
        ),
        ({"privacy": {"level": "verbose"}}, "privacy.level", "none, metadata, redacted, full"),
    ],
)
def test_an_unknown_enum_value_lists_the_accepted_values(
    data: dict[str, Any], key: str, accepted: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(data=data)
    assert f"{key}: " in str(caught.value)
    assert f"accepted values: {accepted}" in str(caught.value)


def test_every_mistake_is_reported_at_once() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(data={"providers": {"p": {"kind": 1, "four_eyes": "no"}}})
    assert "providers.p.kind" in str(caught.value)
    assert "providers.p.four_eyes" in str(caught.value)


# -- sections ------------------------------------------------------------------------------------


def test_a_provider_section_is_read_with_its_connection_settings() -> None:
    config = load_config(
        data={
            "providers": {
                "p": {
                    "kind": "openai",
                    "model": "m",
                    "base_url": "https://example.invalid/v1",
                    "api_key_env": "EXAMPLE_KEY",
                    "timeout_seconds": 5,
                    "max_retries": 0,
                    "four_eyes": True,
                },
                "s": {"kind": "script", "script": "./run.sh", "trust_zone": "privateHosted"},
            }
        }
    )
    p, s = config.providers["p"], config.providers["s"]
    assert p.trust_zone is TrustZone.EXTERNAL_GLOBAL
    assert (p.model, p.base_url, p.api_key_env) == (
        "m",
        "https://example.invalid/v1",
        "EXAMPLE_KEY",
    )
    assert p.timeout_seconds == 5.0
    assert isinstance(p.timeout_seconds, float)
    assert (p.max_retries, p.four_eyes) == (0, True)
    assert s.script == "./run.sh"
    assert s.trust_zone is TrustZone.PRIVATE_HOSTED
    assert (s.timeout_seconds, s.max_retries, s.four_eyes) == (60.0, 2, False)


def test_a_skill_section_defaults_to_enabled_with_no_tools() -> None:
    config = load_config(
        data={"skills": {"s": {}, "t": {"allowed_tools": ["a"], "enabled": False}}}
    )
    assert config.skills["s"].allowed_tools == ()
    assert config.skills["s"].enabled
    assert not config.skills["s"].four_eyes
    assert config.skills["t"].allowed_tools == ("a",)
    assert not config.skills["t"].enabled


def test_the_actor_section_is_the_actor() -> None:
    config = load_config(data={"actor": {"id": "ann", "admin": True, "permissions": ["a", "b"]}})
    assert config.actor() == Actor(id="ann", admin=True, permissions=frozenset({"a", "b"}))


def test_without_an_actor_section_the_actor_is_the_os_user(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("getpass.getuser", lambda: "os-user")
    actor = load_config(data={}).actor()
    assert actor == Actor(id="os-user", admin=False, permissions=frozenset())


def test_privacy_and_store_are_read() -> None:
    config = load_config(
        data={
            "privacy": {"level": "redacted", "retention_days": 5},
            "store": {"url": "sqlite:///x.db", "lease_seconds": 9, "unfinished_retention_days": 2},
        }
    )
    assert config.privacy.level is PrivacyLevel.REDACTED
    assert config.privacy.retention_days == 5
    assert (config.store.url, config.store.lease_seconds) == ("sqlite:///x.db", 9)
    assert config.store.unfinished_retention_days == 2


def test_a_plugin_section_named_by_the_caller_is_kept_raw_and_copied() -> None:
    section = {"colour": "blue", "nested": {"n": [1, 2]}}
    config = load_config(data={"acme": section}, plugin_sections=["acme"])
    section["nested"]["n"].append(3)
    assert config.plugin_settings["acme"] == {"colour": "blue", "nested": {"n": [1, 2]}}
    with pytest.raises(TypeError):
        config.plugin_settings["acme"]["colour"] = "red"  # type: ignore[index]


def test_a_plugin_section_of_an_installed_entry_point_is_accepted_without_importing_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    installed = [
        importlib.metadata.EntryPoint(name="acme", value="no_such_module_xyz", group="nrllm")
    ]

    def entry_points(*, group: str) -> list[importlib.metadata.EntryPoint]:
        return installed if group == "nrllm" else []

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    config = load_config(data={"acme": {"x": 1}})
    assert config.plugin_settings == {"acme": {"x": 1}}
    with pytest.raises(ConfigError, match="other: unknown section"):
        load_config(data={"other": {"x": 1}})


def test_a_plugin_name_does_not_admit_a_scalar() -> None:
    with pytest.raises(ConfigError, match="acme: unknown key"):
        load_config(data={"acme": 1}, plugin_sections=["acme"])


def test_the_configuration_is_frozen() -> None:
    config = load_config(data={"providers": {"p": {"kind": "x"}}})
    with pytest.raises(AttributeError):
        config.tools = config.tools  # type: ignore[misc]
    with pytest.raises(TypeError):
        config.providers["q"] = config.providers["p"]  # type: ignore[index]


# -- zones across fallback chains ----------------------------------------------------------------


def providers(**zones_and_fallbacks: tuple[str, list[str]]) -> HostConfig:
    return load_config(
        data={
            "providers": {
                name: {"kind": "x", "trust_zone": zone, "fallback": fallback}
                for name, (zone, fallback) in zones_and_fallbacks.items()
            }
        }
    )


def test_no_provider_is_the_strictest_zone() -> None:
    assert load_config(data={}).zone_for(None) is TrustZone.EXTERNAL_GLOBAL


def test_an_unconfigured_provider_is_the_strictest_zone() -> None:
    assert providers(a=("local", [])).zone_for("nope") is TrustZone.EXTERNAL_GLOBAL


def test_a_missing_trust_zone_is_external_global() -> None:
    config = load_config(data={"providers": {"p": {"kind": "x"}}})
    assert config.zone_for("p") is TrustZone.EXTERNAL_GLOBAL


def test_a_lone_provider_has_its_own_zone() -> None:
    assert providers(a=("privateHosted", [])).zone_for("a") is TrustZone.PRIVATE_HOSTED


def test_one_external_fallback_drags_a_local_provider_down() -> None:
    config = providers(a=("local", ["b"]), b=("externalEu", []))
    assert config.zone_for("a") is TrustZone.EXTERNAL_EU
    assert config.zone_for("b") is TrustZone.EXTERNAL_EU


def test_the_chain_is_followed_transitively() -> None:
    config = providers(
        a=("local", ["b"]), b=("privateHosted", ["c"]), c=("local", ["d"]), d=("externalGlobal", [])
    )
    assert config.zone_for("a") is TrustZone.EXTERNAL_GLOBAL
    assert config.zone_for("c") is TrustZone.EXTERNAL_GLOBAL


def test_a_more_trusted_fallback_does_not_raise_the_zone() -> None:
    config = providers(a=("externalEu", ["b"]), b=("local", []))
    assert config.zone_for("a") is TrustZone.EXTERNAL_EU
    assert config.zone_for("b") is TrustZone.LOCAL


def test_cycles_terminate_and_every_member_gets_the_least_trusted_zone() -> None:
    config = providers(a=("local", ["b"]), b=("privateHosted", ["c"]), c=("externalEu", ["a"]))
    assert {config.zone_for(n) for n in "abc"} == {TrustZone.EXTERNAL_EU}
    assert providers(a=("local", ["a"])).zone_for("a") is TrustZone.LOCAL


@st.composite
def provider_graphs(draw: st.DrawFn) -> dict[str, tuple[str, list[str]]]:
    names = draw(st.lists(st.sampled_from("abcdef"), min_size=1, max_size=6, unique=True))
    zones = st.sampled_from([z.value for z in TrustZone])
    return {
        name: (draw(zones), draw(st.lists(st.sampled_from(names), max_size=3))) for name in names
    }


@given(provider_graphs())
def test_a_zone_is_the_least_trusted_of_its_own_and_its_fallbacks_zones(
    graph: dict[str, tuple[str, list[str]]],
) -> None:
    config = providers(**graph)
    for name, (zone, fallback) in graph.items():
        expected = max([TrustZone(zone), *(config.zone_for(f) for f in fallback)])
        assert config.zone_for(name) is expected


def test_the_config_loader_reads_again_only_when_the_file_changed(tmp_path, monkeypatch):
    from nrllm_core import _config

    path = tmp_path / "nrllm.toml"
    path.write_text('[actor]\nid = "ann"\n', encoding="utf-8")
    reads: list[object] = []
    real_read = _config._read
    monkeypatch.setattr(_config, "_read", lambda source: reads.append(source) or real_read(source))
    load = _config.config_loader(path)

    assert load().actor().id == "ann"
    assert load().actor().id == "ann"
    assert len(reads) == 1

    path.write_text('[actor]\nid = "bob-the-second"\n', encoding="utf-8")
    assert load().actor().id == "bob-the-second"
    assert len(reads) == 2

    path.write_text("[actor\n", encoding="utf-8")
    with pytest.raises(_config.ConfigError):
        load()


def test_the_config_loader_builds_a_dict_configuration_once():
    from nrllm_core._config import config_loader

    load = config_loader(data={"actor": {"id": "ann"}})
    assert load() is load()


def test_a_configuration_nested_past_any_reader_is_a_config_error(tmp_path: Path) -> None:
    deep = tmp_path / "deep.toml"
    deep.write_text("x = " + "[" * 5000 + "]" * 5000 + "\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="nested too deeply"):
        load_config(deep)
