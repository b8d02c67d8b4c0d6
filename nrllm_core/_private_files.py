"""nrllm's data folder and the files in it that only their owner may read, whatever the umask."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import Final

__all__ = ["private_dir", "private_file"]

_DIR_MODE: Final = 0o700
_FILE_MODE: Final = 0o600


def private_dir(path: Path) -> Path:
    """Create the folder ``path`` with mode 0700 unless it exists; an existing folder is the
    host's choice and keeps its mode. Missing parents get the usual mode."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        # The umask can only take bits away from 0700, so the folder is never wider than 0700;
        # chmod then gives exactly 0700 even under a umask that removes the owner's bits.
        path.mkdir(mode=_DIR_MODE)
        os.chmod(path, _DIR_MODE)
    return path


def private_file(path: Path, *, create: bool = True) -> None:
    """Give ``path`` mode 0600, creating it empty first when ``create`` (never wider meanwhile);
    a missing file that is not to be created is left missing."""
    flags = os.O_RDONLY | os.O_CLOEXEC | (os.O_CREAT if create else 0)
    try:
        fd = os.open(path, flags, _FILE_MODE)
    except FileNotFoundError:
        if create:
            raise
        return
    try:
        if stat.S_IMODE(os.fstat(fd).st_mode) != _FILE_MODE:
            os.fchmod(fd, _FILE_MODE)
    finally:
        os.close(fd)
