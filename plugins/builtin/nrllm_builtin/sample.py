"""The sample database the builtin tools read when the host names none.

Every credential in it is fake, but shaped like a real one so that masking is visible.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqlalchemy import Connection, MetaData

__all__ = ["create_sample_database", "populate_sample"]

_PAGES: list[dict[str, Any]] = [
    {"id": 1, "title": "Home", "slug": "/", "description": "Welcome to the demo site."},
    {"id": 2, "title": "About us", "slug": "/about", "description": "Who we are."},
    {
        "id": 3,
        "title": "Contact",
        "slug": "/contact",
        "description": "Write to press@example.org for interviews.",
    },
]
_CONTENT_ELEMENTS: list[dict[str, Any]] = [
    {
        "id": 1,
        "page_id": 1,
        "ctype": "text",
        "header": "Hello",
        "bodytext": "Our new site is live.\nRead on for the details.",
    },
    {
        "id": 2,
        "page_id": 2,
        "ctype": "text",
        "header": "Our team",
        "bodytext": "Twelve people in two cities.",
    },
    {
        "id": 3,
        "page_id": 3,
        "ctype": "html",
        "header": "Map widget",
        # A credential pasted into content by mistake: the formatter must mask it.
        "bodytext": "<div data-key='sk-FAKEsampleKEY0000000000000000'>map</div>",
    },
]
_USERS: list[dict[str, Any]] = [
    {
        "id": 1,
        "username": "admin",
        "email": "admin@example.com",
        "password_hash": "$argon2id$v=19$m=65536,t=3,p=4$RkFLRXNhbHQ$RkFLRWhhc2hGQUtFaGFzaA",
        "api_token": "ghp_FAKEFAKEFAKEFAKEFAKEFAKEFAKEFAKEFAKE",
    },
    {
        "id": 2,
        "username": "editor",
        "email": "editor@example.com",
        "password_hash": "$2b$12$FAKEFAKEFAKEFAKEFAKEFOFAKEFAKEFAKEFAKEFAKEFAKEFAKEFAK",
        "api_token": "sk-FAKEeditorTOKEN000000000000000",
    },
]
_SESSIONS: list[dict[str, Any]] = [
    {
        "id": 1,
        "user_id": 1,
        "session_token": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJGQUtFIn0.RkFLRXNpZ25hdHVyZQ",
        "expires_at": "2030-01-01T00:00:00",
    },
]
_DRAFTS: list[dict[str, Any]] = [
    {"id": 1, "page_id": 2, "title": "Summer update", "body": "Draft text, not yet reviewed."},
]


def _metadata() -> MetaData:
    from sqlalchemy import Column, ForeignKey, Integer, MetaData, String, Table, Text

    metadata = MetaData()
    Table(
        "pages",
        metadata,
        Column("id", Integer, primary_key=True),
        Column("title", String(200), nullable=False),
        Column("slug", String(200), nullable=False),
        Column("description", Text),
    )
    Table(
        "content_elements",
        metadata,
        Column("id", Integer, primary_key=True),
        Column("page_id", Integer, ForeignKey("pages.id"), nullable=False),
        Column("ctype", String(40), nullable=False),
        Column("header", String(200)),
        Column("bodytext", Text),
    )
    Table(
        "users",
        metadata,
        Column("id", Integer, primary_key=True),
        Column("username", String(100), nullable=False),
        Column("email", String(200)),
        Column("password_hash", String(200)),
        Column("api_token", String(200)),
    )
    Table(
        "sessions",
        metadata,
        Column("id", Integer, primary_key=True),
        Column("user_id", Integer, ForeignKey("users.id"), nullable=False),
        Column("session_token", Text, nullable=False),
        Column("expires_at", String(40)),
    )
    Table(
        "drafts",
        metadata,
        Column("id", Integer, primary_key=True),
        Column("page_id", Integer, ForeignKey("pages.id")),
        Column("title", String(200), nullable=False),
        Column("body", Text),
    )
    return metadata


def populate_sample(connection: Connection) -> None:
    """Create the sample tables in the connection's default schema and fill them."""
    metadata = _metadata()
    metadata.create_all(connection)
    rows = {
        "pages": _PAGES,
        "content_elements": _CONTENT_ELEMENTS,
        "users": _USERS,
        "sessions": _SESSIONS,
        "drafts": _DRAFTS,
    }
    for name, values in rows.items():
        connection.execute(metadata.tables[name].insert(), values)
    # Explicit ids leave PostgreSQL's sequences at 1; the next insert must not collide.
    if connection.dialect.name == "postgresql":
        from sqlalchemy import text

        for name in rows:
            connection.execute(
                text(
                    f"SELECT setval(pg_get_serial_sequence('{name}', 'id'), "
                    f"(SELECT MAX(id) FROM {name}))"
                )
            )


def create_sample_database(path: str | os.PathLike[str]) -> Path:
    """Write the sample SQLite database to ``path`` (replacing it) and return the path.

    It is built in a temporary file first, so a concurrent reader never sees half a database.
    """
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=target.parent, suffix=".tmp")
    os.close(handle)
    try:
        engine = create_engine(f"sqlite+pysqlite:///{temporary}", poolclass=NullPool)
        try:
            with engine.begin() as connection:
                populate_sample(connection)
        finally:
            engine.dispose()
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return target
