"""nrllm's data folder and the files in it that only their owner may read, whatever the umask."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Final

__all__ = ["private_dir", "private_file"]

_DIR_MODE: Final = 0o700
_FILE_MODE: Final = 0o600


def private_dir(path: Path) -> Path:
    """Create the folder ``path`` with mode 0700 unless it exists; an existing folder is the
    host's choice and keeps its mode, but must be the user's and writable by nobody else
    (:class:`ConfigError` if not). Missing parents get the usual mode."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        # The umask can only take bits away from 0700, so the folder is never wider than 0700;
        # chmod then gives exactly 0700 even under a umask that removes the owner's bits.
        path.mkdir(mode=_DIR_MODE)
    except FileExistsError:
        _check_owned(path)
    else:
        os.chmod(path, _DIR_MODE)
    return path


def _check_owned(path: Path) -> None:
    # Whoever else may write the folder may put a link where a key or the database is
    # expected: nrllm would then read their key, or change their file's mode.
    info = os.stat(path)
    foreign = hasattr(os, "getuid") and info.st_uid != os.getuid()
    if foreign or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        from nrllm_core._config import ConfigError

        raise ConfigError(
            f"{path}: the data folder must be the user's own and writable by no one else"
        )


def private_file(path: Path, *, create: bool = True) -> None:
    """Give ``path`` mode 0600, creating it empty first when ``create`` (never wider meanwhile);
    a missing file that is not to be created is left missing.

    An existing file is never opened here: it may be a SQLite database this process has open,
    and closing any descriptor of a file drops every POSIX lock the process holds on it, so
    another process could take the database out of WAL mode under a live connection and
    corrupt it. Its mode is read and set by path (the folder is the owner's alone)."""
    if create:
        try:
            # O_EXCL: only a file this call creates is opened, which no connection can hold.
            fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, _FILE_MODE)
        except FileExistsError:
            pass
        else:
            try:
                # The umask may have taken bits from 0600; give exactly 0600.
                os.fchmod(fd, _FILE_MODE)
            finally:
                os.close(fd)
            return
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        if create:
            raise
        return
    if mode != _FILE_MODE:
        os.chmod(path, _FILE_MODE)
