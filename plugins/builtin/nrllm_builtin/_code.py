"""The host's source code, under configured roots only: ``read_source`` and ``search_code``."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path, PurePath
from types import MappingProxyType
from typing import Any, Final

from nrllm_builtin._policy import is_sensitive_column
from nrllm_builtin._settings import settings_or_error
from nrllm_core import Integrity, Tool, ToolContext, ToolResult
from nrllm_core.redact import mask_secrets

__all__ = ["ReadSource", "SearchCode"]

MAX_FILE_BYTES: Final = 512 * 1024
DEFAULT_LINES: Final = 200
MAX_LINES: Final = 500
MAX_LINE_CHARS: Final = 400
MAX_MATCHES: Final = 100
MAX_FILES_SCANNED: Final = 5_000
MAX_PATTERN_CHARS: Final = 200
# Folders that hold no source of the host's own and can be huge.
_SKIPPED_DIRS: Final = frozenset({"node_modules", "__pycache__", "vendor"})
_NO_ROOTS: Final = "No source roots are configured ([builtin] source_roots)."
# File names that hold keys, keystores or credentials rather than source: never opened.
# ``id_*`` only without an extension (or ``.pub``), the shape of SSH keys, so ``id_map.py``
# stays readable.
_SECRET_FILE: Final = re.compile(
    r".*\.(?:pem|key|p12|pfx|kdbx)|id_[^.]*(?:\.pub)?|.*secret.*|.*credential.*",
    re.IGNORECASE,
)
# ``NAME=value``, ``NAME: value``, ``export NAME=value`` and ``"NAME": value``: the shapes of
# env files, YAML, TOML and JSON, where a credential-like NAME makes the value a secret.
_ASSIGNMENT: Final = re.compile(
    r"""(?P<head>\s*(?:export\s+)?["']?(?P<name>[A-Za-z_][\w.\-]*)["']?\s*[:=]\s*)(?P<value>\S.*)"""
)
# Linux lists each open descriptor here as a link to the file it really refers to.
_PROC_FD: Final = "/proc/self/fd"
_OPEN_FLAGS: Final = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)


class _Refused(Exception):
    """A path the tool will not open; the message is safe to show."""


def _roots(context: ToolContext, tool: str) -> list[Path] | ToolResult:
    settings = settings_or_error(context, tool)
    if isinstance(settings, ToolResult):
        return settings
    return [Path(os.path.realpath(root)) for root in settings.source_roots]


def _locate(roots: list[Path], raw: object) -> tuple[Path, Path]:
    """The real file or folder ``raw`` names and the root holding it.

    A relative path is tried under each root in order. ``..`` is refused outright, a path
    outside every root is not found, and a path with a symlink anywhere on it is refused, as
    is a hidden part (``.env``, ``.git/config``) or a part named like a key or credential.
    """
    if not isinstance(raw, str) or not raw.strip() or "\x00" in raw:
        raise _Refused("path: expected a non-empty path relative to a source root.")
    if ".." in PurePath(raw).parts:
        raise _Refused("path: '..' is not allowed.")
    given = Path(raw)
    candidates = [given] if given.is_absolute() else [root / given for root in roots]
    for candidate in candidates:
        lexical = Path(os.path.abspath(candidate))
        root = next((r for r in roots if lexical.is_relative_to(r)), None)
        if root is None or not (lexical.exists() or lexical.is_symlink()):
            continue
        if Path(os.path.realpath(lexical)) != lexical:
            # Any symlink on the way is refused, even one that stays inside: no link can be
            # retargeted between this check and the read.
            raise _Refused("path: symbolic links are not followed.")
        _check_name(lexical.relative_to(root))
        return lexical, root
    raise _Refused("path: not found under any source root.")


def _check_name(relative: PurePath) -> None:
    """Refuse a hidden part anywhere below the root, and a part named like a key or credential.

    Folders count too: ``secrets/db.yaml`` is as much a secret as ``db_secrets.yaml``.
    """
    if any(part.startswith(".") for part in relative.parts):
        raise _Refused("path: hidden files and folders are not read.")
    if any(_is_secret_file(part) for part in relative.parts):
        raise _Refused("path: files named like keys or credentials are not read.")


def _is_secret_file(name: str) -> bool:
    return name.startswith(".") or _SECRET_FILE.fullmatch(name) is not None


def _read_text(path: Path) -> str:
    """The file's text; refused when it is not a regular file, has another hard link, is too
    large, or binary.

    ``path`` was checked for symlinks before this call; the opened descriptor is checked
    again, so a folder swapped for a link in between is caught rather than followed.
    """
    try:
        # lstat first: opening a FIFO or a device could block or have effects.
        if not stat.S_ISREG(os.lstat(path).st_mode):
            raise _Refused("path: not a regular file.")
        # O_NONBLOCK too: a FIFO swapped in after the lstat must not hang the open.
        descriptor = os.open(path, _OPEN_FLAGS)
    except OSError:
        raise _Refused("path: the file cannot be opened.") from None
    with os.fdopen(descriptor, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise _Refused("path: not a regular file.")
        if info.st_nlink > 1:
            # A hard link has no direction: the other name can be anywhere on the file system,
            # and no check of this name can tell. Counted on the descriptor, not the path.
            raise _Refused("path: files with more than one hard link are not read.")
        if not _opened_is(handle.fileno(), info, path):
            raise _Refused("path: the file changed while it was opened.")
        if info.st_size > MAX_FILE_BYTES:
            raise _Refused(f"path: the file is larger than {MAX_FILE_BYTES // 1024} KiB.")
        data = handle.read(MAX_FILE_BYTES + 1)
    if b"\x00" in data:
        raise _Refused("path: binary files are not read.")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise _Refused("path: binary files are not read.") from None


def _opened_is(descriptor: int, info: os.stat_result, path: Path) -> bool:
    """Whether the open descriptor is the file at ``path``, which has no symlink on it."""
    proc = f"{_PROC_FD}/{descriptor}"
    if os.path.islink(proc):
        # Linux names the file the descriptor really refers to, whatever was swapped.
        return os.readlink(proc) == str(path)
    try:
        named = os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    return os.path.realpath(path) == str(path) and (named.st_dev, named.st_ino) == (
        info.st_dev,
        info.st_ino,
    )


def _masked_lines(text: str) -> list[str]:
    """The file's lines, masked as one text first: a key block spans many lines, and masking
    keeps every line where it was."""
    return mask_secrets(text).splitlines()


def _shown(line: str) -> str:
    masked = mask_secrets(_mask_assignment(line.rstrip("\r\n")))
    return masked if len(masked) <= MAX_LINE_CHARS else masked[:MAX_LINE_CHARS] + "…"


def _mask_assignment(line: str) -> str:
    """The line with its value masked when it assigns to a credential-like name."""
    match = _ASSIGNMENT.fullmatch(line)
    if match is None or not is_sensitive_column(match["name"]):
        return line
    return f"{match['head']}***"


class ReadSource(Tool):
    name = "read_source"
    description = (
        "Read a source file under the host's source roots, with line numbers. Give a path "
        "relative to a root; optionally the first line and how many lines (max 500)."
    )
    group = "code"
    parameters = MappingProxyType(
        {
            "type": "object",
            "properties": {
                "path": {"type": "string", "minLength": 1, "maxLength": 1024},
                "start_line": {"type": "integer", "minimum": 1, "maximum": 1_000_000, "default": 1},
                "lines": {"type": "integer", "minimum": 1, "maximum": MAX_LINES, "default": 200},
            },
            "required": ["path"],
            "additionalProperties": False,
        }
    )
    # The host's own source tree.
    integrity = Integrity.TRUSTED

    def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        roots = _roots(context, self.name)
        if isinstance(roots, ToolResult):
            return roots
        if not roots:
            return ToolResult.text(_NO_ROOTS)
        start = arguments.get("start_line", 1)
        count = arguments.get("lines", DEFAULT_LINES)
        if not _int_in(start, 1, 1_000_000) or not _int_in(count, 1, MAX_LINES):
            return ToolResult.text(f"start_line and lines: integers, lines at most {MAX_LINES}.")
        try:
            path, root = _locate(roots, arguments.get("path"))
            if path.is_dir():
                raise _Refused("path: a folder; name a file.")
            lines = _masked_lines(_read_text(path))
        except _Refused as refusal:
            return ToolResult.text(str(refusal))
        window = lines[start - 1 : start - 1 + count]
        relative = path.relative_to(root).as_posix()
        if not window:
            return ToolResult.text(f"{relative} has {len(lines)} lines; none from line {start}.")
        header = f"{relative} lines {start}-{start + len(window) - 1} of {len(lines)}:"
        body = [f"{start + i:>5}  {_shown(line)}" for i, line in enumerate(window)]
        return ToolResult.text("\n".join([header, *body]))


class SearchCode(Tool):
    name = "search_code"
    description = (
        "Find a plain substring (case-insensitive, not a regular expression) in the text files "
        "under the host's source roots, or under one folder or file of them. Returns up to "
        f"{MAX_MATCHES} matching lines as path:line: text."
    )
    group = "code"
    parameters = MappingProxyType(
        {
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "minLength": 1, "maxLength": MAX_PATTERN_CHARS},
                "path": {"type": "string", "minLength": 1, "maxLength": 1024},
            },
            "required": ["pattern"],
            "additionalProperties": False,
        }
    )
    integrity = Integrity.TRUSTED

    def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        roots = _roots(context, self.name)
        if isinstance(roots, ToolResult):
            return roots
        if not roots:
            return ToolResult.text(_NO_ROOTS)
        pattern = arguments.get("pattern")
        if not isinstance(pattern, str) or not pattern or len(pattern) > MAX_PATTERN_CHARS:
            return ToolResult.text(f"pattern: expected 1 to {MAX_PATTERN_CHARS} characters.")
        try:
            if "path" in arguments:
                start, root = _locate(roots, arguments["path"])
                places = [(start, root)]
            else:
                places = [(root, root) for root in roots if root.is_dir()]
        except _Refused as refusal:
            return ToolResult.text(str(refusal))
        needle = pattern.lower()
        matches: list[str] = []
        for path, root in _files(places):
            try:
                text = _read_text(path)
            except _Refused:
                continue
            if needle not in text.lower():
                continue
            for number, line in enumerate(_masked_lines(text), 1):
                shown = _shown(line.strip())
                # Only a match the reader can see: a masked value is never confirmed.
                if needle in shown.lower():
                    where = path.relative_to(root).as_posix()
                    matches.append(f"{where}:{number}: {shown}")
                    if len(matches) >= MAX_MATCHES:
                        break
            if len(matches) >= MAX_MATCHES:
                break
        if not matches:
            return ToolResult.text("No matches.")
        more = " (stopped at the limit)" if len(matches) >= MAX_MATCHES else ""
        return ToolResult.text("\n".join([f"Matches ({len(matches)}){more}:", *matches]))


def _files(places: list[tuple[Path, Path]]) -> Iterator[tuple[Path, Path]]:
    """Files under each place; symlinks, hidden or vendored folders and hidden or key-like
    files skipped."""
    scanned = 0
    for start, root in places:
        if start.is_file():
            yield start, root
            continue
        for folder, dirs, files in os.walk(start, followlinks=False):
            dirs[:] = sorted(d for d in dirs if not _is_secret_file(d) and d not in _SKIPPED_DIRS)
            for name in sorted(files):
                path = Path(folder) / name
                if _is_secret_file(name) or path.is_symlink():
                    continue
                scanned += 1
                if scanned > MAX_FILES_SCANNED:
                    return
                yield path, root


def _int_in(value: object, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
