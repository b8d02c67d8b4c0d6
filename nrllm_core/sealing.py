"""Small secrets a plugin keeps in the data folder: sealed with the state key, written 0600.

The same key and AES-GCM sealing that protect suspended runs (``NRLLM_STATE_KEY``, else
``state.key`` in the data folder). A sealed file opens only with the label it was sealed to,
so a file moved to another purpose (another server's tokens, say) does not open there.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

from nrllm_core._private_files import private_dir
from nrllm_core._sealing import SealError, load_state_key, open_sealed, seal

__all__ = ["SealError", "read_sealed", "write_sealed"]


def write_sealed(
    path: Path,
    bound_to: str,
    plaintext: bytes,
    *,
    data_dir: Path,
    environ: Mapping[str, str] | None = None,
) -> None:
    """Seal ``plaintext`` to ``bound_to`` with ``data_dir``'s state key and write it to
    ``path`` (its folder created 0700 if missing): mode 0600, replaced whole, so a reader sees
    the old file or the new one, never a part."""
    key = load_state_key(data_dir, None if environ is None else dict(environ))
    sealed = seal(key, bound_to, plaintext)
    private_dir(path.parent)
    # mkstemp creates the file 0600 whatever the umask; the rename is atomic in one folder.
    fd, aside = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(sealed)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(aside, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(aside)
        raise


def read_sealed(
    path: Path, bound_to: str, *, data_dir: Path, environ: Mapping[str, str] | None = None
) -> bytes | None:
    """The plaintext sealed at ``path`` to ``bound_to``; ``None`` when there is no such file,
    :class:`SealError` when it was altered, sealed to another label or with another key."""
    try:
        sealed = path.read_bytes()
    except FileNotFoundError:
        return None
    key = load_state_key(data_dir, None if environ is None else dict(environ))
    return open_sealed(key, bound_to, sealed)
