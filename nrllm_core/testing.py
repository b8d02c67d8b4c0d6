"""Helpers for testing plugins and hosts; opt-in, never imported by ``nrllm_core`` itself."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from typing import Final

from nrllm_core._sink_recorder import SinkRecorder

__all__ = ["POSTGRES_ENV", "SinkRecorder", "postgres_schema"]

POSTGRES_ENV: Final = "NRLLM_TEST_POSTGRES_URL"


@contextlib.contextmanager
def postgres_schema(prefix: str) -> Iterator[str]:
    """A SQLAlchemy URL for a fresh PostgreSQL schema on ``$NRLLM_TEST_POSTGRES_URL``.

    The schema is dropped afterwards. Without the variable the test is skipped with a message
    saying how to run it, except under ``CI``, where the test fails: CI must never skip them.
    """
    import pytest
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url
    from sqlalchemy.pool import NullPool

    base = os.environ.get(POSTGRES_ENV)
    if not base:
        if os.environ.get("CI"):
            pytest.fail(f"{POSTGRES_ENV} is not set: CI must run the PostgreSQL cases")
        pytest.skip(
            f"PostgreSQL cases: set {POSTGRES_ENV}="
            "postgresql+psycopg://postgres@127.0.0.1:5432/test to run them"
        )
    schema = f"{prefix}_{uuid.uuid4().hex[:16]}"
    admin = create_engine(make_url(base).set(drivername="postgresql+psycopg"), poolclass=NullPool)
    with admin.begin() as connection:
        connection.execute(text(f'CREATE SCHEMA "{schema}"'))
    url = make_url(base).update_query_dict({"options": f"-csearch_path={schema}"})
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        with admin.begin() as connection:
            connection.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()
