"""The pin store: each MCP tool's approved definition, by digest, in the audit's database,
each row authenticated by an HMAC under a key derived from the audit key; and the servers
whose first listing was pinned.

Importing this module loads SQLAlchemy; the plugin imports it inside functions.
"""

from __future__ import annotations

import enum
import hmac
import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, final

import attrs
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from nrllm_mcp._definition import Definition
from nrllm_mcp._schema import PINS, SERVERS, VERSION_TABLE

__all__ = ["MacCheck", "Pin", "PinState", "PinStore", "pin_states"]

_MIGRATIONS: Final = Path(__file__).parent / "migrations"
# Any constant shared by every process that migrates: PostgreSQL serialises them on it.
_MIGRATION_LOCK: Final = 0x6E726C6C6D4D43
# The purpose the audit store derives the pins' key for, and the label of each row's mac.
_KEY_PURPOSE: Final = "nrllm-mcp pins"
_MAC_LABEL: Final = "nrllm-mcp pin v1"


class PinState(enum.StrEnum):
    """A tool's definition against its pin."""

    PINNED = "pinned"
    CHANGED = "changed"
    UNPINNED = "unpinned"
    # The server was never listed: its tools are pinned as they are at the first listing.
    NEW = "new"


class MacCheck(enum.StrEnum):
    """A pin row against its mac."""

    VALID = "valid"
    TAMPERED = "tampered"
    # Pinned before pins carried a mac.
    MISSING = "missing"


@final
@attrs.frozen(kw_only=True)
class Pin:
    server: str
    tool: str
    digest: str
    definition: Definition
    pinned_at: str
    pinned_by: str
    mac: MacCheck


@final
class PinStore:
    """Pins by server. Build it with :meth:`open`; every write commits before returning."""

    __slots__ = ("_engine", "_key")

    def __init__(self, engine: Engine, key: bytes) -> None:
        self._engine = engine
        self._key = key

    @classmethod
    def open(cls, url: str | None, *, data_dir: Path | None) -> PinStore:
        """Connect as the audit store does (``None``: the embedded ``nrllm.db`` in
        ``data_dir``), bring the pin tables to the shipped head on first use, and derive the
        pins' key from the audit key over that connection. Only a database no audit store
        has opened yet has the audit store open once, to make its tables and key."""
        from nrllm_core.store import Store, open_plugin_engine, plugin_key

        engine = open_plugin_engine(
            url,
            data_dir,
            migrations=_MIGRATIONS,
            version_table=VERSION_TABLE,
            lock_key=_MIGRATION_LOCK,
        )
        try:
            try:
                key = plugin_key(engine, _KEY_PURPOSE)
            except LookupError:
                Store.open(url, data_dir=data_dir).close()
                key = plugin_key(engine, _KEY_PURPOSE)
        except BaseException:
            engine.dispose()
            raise
        return cls(engine, key)

    def close(self) -> None:
        self._engine.dispose()

    def __enter__(self) -> PinStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def pins(self, server: str | None = None) -> list[Pin]:
        """Every pin, or one server's, by server then tool."""
        query = sa.select(PINS).order_by(PINS.c.server, PINS.c.tool)
        if server is not None:
            query = query.where(PINS.c.server == server)
        with self._engine.connect() as connection:
            return [
                Pin(
                    server=row["server"],
                    tool=row["tool"],
                    digest=row["digest"],
                    definition=Definition.from_json(row["definition"]),
                    pinned_at=row["pinned_at"],
                    pinned_by=row["pinned_by"],
                    mac=self._check(row),
                )
                for row in connection.execute(query).mappings()
            ]

    def known(self, server: str) -> bool:
        """Whether ``server`` was listed before: its first listing was pinned, or it has pins
        from before the first listing was recorded."""
        with self._engine.connect() as connection:
            for table in (SERVERS, PINS):
                found = connection.execute(
                    sa.select(table.c.server).where(table.c.server == server).limit(1)
                ).first()
                if found is not None:
                    return True
        return False

    def pin(self, server: str, definitions: Iterable[Definition], *, by: str) -> None:
        """Pin (or re-pin) these definitions of ``server``'s tools, in one transaction, and
        the server as listed (with no definition at all, the server alone)."""
        now = datetime.now(UTC).isoformat(timespec="seconds")
        rows = [
            {
                "server": server,
                "tool": d.name,
                "digest": d.digest,
                "definition": d.canonical(),
                "pinned_at": now,
                "pinned_by": by,
            }
            for d in definitions
        ]
        for row in rows:
            row["mac"] = self._mac(row)
        with self._engine.begin() as connection:
            listed = connection.execute(
                sa.select(SERVERS.c.server).where(SERVERS.c.server == server)
            ).first()
            if listed is None:
                connection.execute(
                    sa.insert(SERVERS), {"server": server, "pinned_at": now, "pinned_by": by}
                )
            if not rows:
                return
            connection.execute(
                sa.delete(PINS)
                .where(PINS.c.server == server)
                .where(PINS.c.tool.in_([r["tool"] for r in rows]))
            )
            connection.execute(sa.insert(PINS), rows)

    # A row: a dict, or SQLAlchemy's RowMapping (whose keys are not typed as str).
    def _mac(self, row: Mapping[Any, Any]) -> str:
        fields = [
            _MAC_LABEL,
            *(row[c] for c in ("server", "tool", "digest", "definition", "pinned_at", "pinned_by")),
        ]
        # An array of strings has one compact ASCII encoding: no two rows share a message.
        message = json.dumps(fields, separators=(",", ":")).encode("ascii")
        return hmac.digest(self._key, message, "sha256").hex()

    def _check(self, row: Mapping[Any, Any]) -> MacCheck:
        stored = row["mac"]
        if stored is None:
            return MacCheck.MISSING
        if isinstance(stored, str) and hmac.compare_digest(stored, self._mac(row)):
            return MacCheck.VALID
        return MacCheck.TAMPERED


def pin_states(definitions: Iterable[Definition], pins: Iterable[Pin]) -> Mapping[str, PinState]:
    """Each listed tool's state against its server's pins; a pin whose mac does not hold
    matches nothing."""
    by_tool = {p.tool: p.digest if p.mac is MacCheck.VALID else None for p in pins}
    return {
        d.name: PinState.UNPINNED
        if d.name not in by_tool
        else PinState.PINNED
        if by_tool[d.name] == d.digest
        else PinState.CHANGED
        for d in definitions
    }
