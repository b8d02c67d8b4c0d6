"""Sealing suspended run state with AES-GCM, bound to its run id."""

from __future__ import annotations

import base64
import binascii
import contextlib
import os
import secrets
import tempfile
from pathlib import Path
from typing import Final

from nrllm_core._private_files import private_dir

__all__ = ["SealError", "decode_key", "load_state_key", "open_sealed", "seal"]

_KEY_BYTES: Final = 32
_NONCE_BYTES: Final = 12
_KEY_FILE: Final = "state.key"


class SealError(ValueError):
    """A sealed state could not be opened: tampered with, moved to another run, or a wrong key."""


def decode_key(text: str, source: str = "NRLLM_STATE_KEY") -> bytes:
    """A 32-byte key from its URL-safe base64 text; ``SealError`` naming ``source`` otherwise."""
    stripped = text.strip()
    try:
        # Accept the key with or without its base64 padding; validate, so that a stray
        # character is an error rather than silently dropped.
        key = base64.b64decode(stripped + "=" * (-len(stripped) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        raise SealError(f"{source} is not URL-safe base64") from None
    if len(key) != _KEY_BYTES:
        raise SealError(f"{source} must decode to {_KEY_BYTES} bytes, not {len(key)}")
    return key


def load_state_key(data_dir: Path, environ: dict[str, str] | None = None) -> bytes:
    """The key from ``NRLLM_STATE_KEY``, else from a 0600 key file created on first use."""
    env = os.environ if environ is None else environ
    if env.get("NRLLM_STATE_KEY"):
        return decode_key(env["NRLLM_STATE_KEY"])
    path = data_dir / _KEY_FILE
    private_dir(data_dir)
    if not path.exists():
        # Written aside (mkstemp: mode 0600), then linked into place: no reader ever sees a
        # half-written key, and of two processes creating it at once, exactly one key wins.
        fd, aside = tempfile.mkstemp(dir=data_dir, prefix=f".{_KEY_FILE}.")
        try:
            with os.fdopen(fd, "w", encoding="ascii") as handle:
                handle.write(base64.urlsafe_b64encode(secrets.token_bytes(_KEY_BYTES)).decode())
            with contextlib.suppress(FileExistsError):
                os.link(aside, path)
        finally:
            os.unlink(aside)
    return decode_key(path.read_text(encoding="ascii"), source=str(path))


def seal(key: bytes, bound_to: str, plaintext: bytes) -> bytes:
    """Encrypt and authenticate ``plaintext``; it opens only with the same ``bound_to``."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    nonce = secrets.token_bytes(_NONCE_BYTES)
    return nonce + AESGCM(key).encrypt(nonce, plaintext, bound_to.encode())


def open_sealed(key: bytes, bound_to: str, sealed: bytes) -> bytes:
    """The plaintext, or :class:`SealError` when the state was altered or belongs elsewhere."""
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    if len(sealed) <= _NONCE_BYTES:
        raise SealError("sealed state is truncated")
    try:
        return AESGCM(key).decrypt(sealed[:_NONCE_BYTES], sealed[_NONCE_BYTES:], bound_to.encode())
    except InvalidTag:
        raise SealError("sealed state failed authentication") from None
