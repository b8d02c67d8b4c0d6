"""The pin store: each MCP tool's approved definition, by digest, in the audit's database.

Importing this module loads SQLAlchemy; the plugin imports it inside functions.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Final, final

import attrs
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from nrllm_mcp._definition import Definition
from nrllm_mcp._schema import PINS, VERSION_TABLE

__all__ = ["Pin", "PinState", "PinStore", "pin_states"]

_MIGRATIONS: Final = Path(__file__).parent / "migrations"
# Any constant shared by every process that migrates: PostgreSQL serialises them on it.
_MIGRATION_LOCK: Final = 0x6E726C6C6D4D43


class PinState(enum.StrEnum):
    """A tool's definition against its pin."""

    PINNED = "pinned"
    CHANGED = "changed"
    UNPINNED = "unpinned"


@final
@attrs.frozen(kw_only=True)
class Pin:
    server: str
    tool: str
    digest: str
    definition: Definition
    pinned_at: str
    pinned_by: str


@final
class PinStore:
    """Pins by server. Build it with :meth:`open`; every write commits before returning."""

    __slots__ = ("_engine",)

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    @classmethod
    def open(cls, url: str | None, *, data_dir: Path | None) -> PinStore:
        """Connect as the audit store does (``None``: the embedded ``nrllm.db`` in
        ``data_dir``) and bring the pin table to the shipped head on first use."""
        from nrllm_core.store import open_plugin_engine

        engine = open_plugin_engine(
            url,
            data_dir,
            migrations=_MIGRATIONS,
            version_table=VERSION_TABLE,
            lock_key=_MIGRATION_LOCK,
        )
        return cls(engine)

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
                )
                for row in connection.execute(query).mappings()
            ]

    def pin(self, server: str, definitions: Iterable[Definition], *, by: str) -> None:
        """Pin (or re-pin) these definitions of ``server``'s tools, in one transaction."""
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
        if not rows:
            return
        with self._engine.begin() as connection:
            connection.execute(
                sa.delete(PINS)
                .where(PINS.c.server == server)
                .where(PINS.c.tool.in_([r["tool"] for r in rows]))
            )
            connection.execute(sa.insert(PINS), rows)


def pin_states(definitions: Iterable[Definition], pins: Iterable[Pin]) -> Mapping[str, PinState]:
    """Each listed tool's state against its server's pins."""
    by_tool = {p.tool: p.digest for p in pins}
    return {
        d.name: PinState.UNPINNED
        if d.name not in by_tool
        else PinState.PINNED
        if by_tool[d.name] == d.digest
        else PinState.CHANGED
        for d in definitions
    }
