"""A provider that replays a script of turns: deterministic, offline, for the demo and tests."""

from __future__ import annotations

import functools
import re
import tomllib
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, final

import attrs

from nrllm_core import _json
from nrllm_core._messages import (
    ChatMessage,
    Delta,
    ProviderAnswer,
    ProviderError,
    Role,
    TextDelta,
    ToolCall,
    ToolChoice,
    ToolSpec,
    Usage,
)
from nrllm_core._providers import ProviderConfigError

__all__ = ["ScriptedProvider", "scripted_check", "scripted_factory"]

_TURN_KEYS: Final = frozenset({"content", "tool_calls", "usage"})
_CALL_KEYS: Final = frozenset({"id", "name", "arguments"})
_USAGE_KEYS: Final = frozenset(a.name for a in attrs.fields(Usage))
# A streamed turn's text comes a word at a time, each with the whitespace after it.
_WORD: Final = re.compile(r"\s*\S+\s*|\s+")


@final
@attrs.frozen(kw_only=True)
class _Turn:
    content: str
    tool_calls: tuple[ToolCall, ...]
    usage: Usage


@final
class ScriptedProvider:
    """Answers turn N with the script's turn N.

    N is the number of assistant messages in the transcript it is handed, so the provider keeps
    no state: a run resumed in another process continues where it left off. Streamed, the
    turn's text arrives a word at a time.
    """

    __slots__ = ("_turns", "name", "script")

    def __init__(self, *, name: str, script: Path, turns: Sequence[_Turn]) -> None:
        self.name = name
        self.script = script
        self._turns = tuple(turns)

    @classmethod
    def load(cls, name: str, script: Path) -> ScriptedProvider:
        """Read and check the whole script now, so a bad one fails before any run starts.

        A script read before is read again only when its file changed (its path, size,
        modification time or inode), as the configuration file is: a host builds its provider
        for every run."""
        try:
            stat = script.stat()
        except OSError as exc:
            raise _unreadable(name, script, exc) from None
        turns = _read_turns(name, script, (stat.st_mtime_ns, stat.st_size, stat.st_ino))
        return cls(name=name, script=script, turns=turns)

    def __repr__(self) -> str:
        return f"ScriptedProvider(name={self.name!r}, script={str(self.script)!r})"

    def complete(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec],
        *,
        tool_choice: ToolChoice = "auto",
    ) -> ProviderAnswer:
        index = sum(1 for m in messages if m.role is Role.ASSISTANT)
        if index >= len(self._turns):
            raise ProviderError(
                f'provider "{self.name}": the script {self.script.name} ran out after '
                f"{len(self._turns)} turns (turn {index + 1} was asked for)"
            )
        turn = self._turns[index]
        # A model that was offered no tools, or told to call none, does not call one.
        calls = turn.tool_calls if tools and tool_choice == "auto" else ()
        return ProviderAnswer(
            content=turn.content,
            tool_calls=calls,
            usage=turn.usage,
            finish_reason="tool_calls" if calls else "stop",
        )

    async def acomplete(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec],
        *,
        tool_choice: ToolChoice = "auto",
    ) -> ProviderAnswer:
        return self.complete(messages, tools, tool_choice=tool_choice)

    def stream(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec],
        *,
        tool_choice: ToolChoice = "auto",
        on_delta: Callable[[Delta], None],
    ) -> ProviderAnswer:
        answer = self.complete(messages, tools, tool_choice=tool_choice)
        for word in _WORD.findall(answer.content):
            on_delta(TextDelta(text=word))
        return answer

    async def astream(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec],
        *,
        tool_choice: ToolChoice = "auto",
        on_delta: Callable[[Delta], None],
    ) -> ProviderAnswer:
        return self.stream(messages, tools, tool_choice=tool_choice, on_delta=on_delta)


def _error(name: str, script: Path, message: str) -> ProviderConfigError:
    return ProviderConfigError(f'provider "{name}": the script {script.name} {message}')


def _unreadable(name: str, script: Path, exc: OSError) -> ProviderConfigError:
    return _error(name, script, f"cannot be read ({type(exc).__name__})")


# A few scripts' turns, each kept while its file is unchanged (``stamp``); a script that fails
# its checks raises, and is read again next time.
@functools.lru_cache(maxsize=32)
def _read_turns(name: str, script: Path, stamp: tuple[int, int, int]) -> tuple[_Turn, ...]:
    try:
        raw = script.read_bytes()
    except OSError as exc:
        raise _unreadable(name, script, exc) from None
    try:
        data = _json.loads(raw) if script.suffix == ".json" else tomllib.loads(raw.decode())
    except (ValueError, UnicodeDecodeError, RecursionError):
        # tomllib has no depth limit of its own: a deep one is no script either.
        raise _error(name, script, "is not valid JSON or TOML") from None
    turns = data.get("turns") if isinstance(data, dict) else None
    if not isinstance(turns, list):
        raise _error(name, script, 'needs a list "turns"')
    return tuple(_turn(name, script, index, turn) for index, turn in enumerate(turns))


def _turn(name: str, script: Path, index: int, raw: object) -> _Turn:
    def bad(message: str) -> ProviderConfigError:
        return _error(name, script, f"turn {index + 1}: {message}")

    if not isinstance(raw, dict) or not _TURN_KEYS.issuperset(raw):
        raise bad(f"must be a table with only {', '.join(sorted(_TURN_KEYS))}")
    content = raw.get("content", "")
    raw_calls = raw.get("tool_calls", [])
    if not isinstance(content, str):
        raise bad('"content" must be a string')
    if not isinstance(raw_calls, list) or ("tool_calls" not in raw and "content" not in raw):
        raise bad('needs "content" or a list "tool_calls"')
    calls = []
    for position, call in enumerate(raw_calls):
        if not isinstance(call, dict) or not _CALL_KEYS.issuperset(call):
            raise bad(f"call {position + 1} must be a table with name, arguments and id")
        arguments = call.get("arguments", {})
        call_id = call.get("id", f"call_{index}_{position}")
        if not isinstance(call.get("name"), str) or not call["name"]:
            raise bad(f"call {position + 1} needs a name")
        if not isinstance(arguments, dict) or not isinstance(call_id, str) or not call_id:
            raise bad(f"call {position + 1} needs an arguments table and a string id")
        try:
            _json.dumps(arguments)
        except ValueError:
            raise bad(f"call {position + 1} has arguments with no JSON form") from None
        calls.append(ToolCall(id=call_id, name=call["name"], arguments=arguments))
    return _Turn(content=content, tool_calls=tuple(calls), usage=_usage(raw.get("usage", {}), bad))


def _usage(raw: object, bad: Callable[[str], ProviderConfigError]) -> Usage:
    if not isinstance(raw, dict) or not _USAGE_KEYS.issuperset(raw):
        raise bad(f"usage must be a table of {', '.join(sorted(_USAGE_KEYS))}")
    try:
        return Usage(**raw)
    except ValueError:
        raise bad("usage counts must be non-negative integers") from None


def scripted_factory(
    name: str,
    settings: Mapping[str, Any],
    *,
    config_dir: Path | None,
    environ: Mapping[str, str],
) -> ScriptedProvider:
    """The ``scripted`` kind: ``script`` names the file, relative to the configuration's folder."""
    script = settings.get("script")
    if not isinstance(script, str) or not script:
        raise ProviderConfigError(f'provider "{name}": "script" must name a script file')
    path = Path(script).expanduser()
    if not path.is_absolute() and config_dir is not None:
        path = config_dir / path
    return ScriptedProvider.load(name, path)


def scripted_check(
    name: str, settings: Mapping[str, Any], *, config_dir: Path | None
) -> Iterator[tuple[str, str]]:
    """The script is part of the configuration: a missing or broken one fails every command
    alike, at the load."""
    try:
        scripted_factory(name, settings, config_dir=config_dir, environ={})
    except ProviderConfigError as exc:
        yield "script", str(exc)
