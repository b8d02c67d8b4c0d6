"""Opening the store reads the schema's revision in one query; Alembic loads only to migrate."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from nrllm_core.store import SchemaOutdatedError, Store
from nrllm_core.store._database import (
    HEAD_REVISION,
    _alembic_config,
    current_revisions,
    engine_for,
    head_revisions,
)


def test_the_head_revision_constant_is_alembics_head() -> None:
    # A new migration moves Alembic's head: the constant must move with it.
    assert head_revisions() == {HEAD_REVISION}


def test_opening_an_up_to_date_store_does_not_import_alembic(tmp_path: Path) -> None:
    Store.open(None, data_dir=tmp_path, environ={}).close()
    script = textwrap.dedent(
        f"""
        import sys
        from nrllm_core.store import Store
        Store.open(None, data_dir={str(tmp_path)!r}, environ={{}}).close()
        print(sorted(m for m in sys.modules if m.split(".")[0] == "alembic"))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"


def test_a_new_database_has_no_revision_until_migrated(backend: Any) -> None:
    engine = engine_for(backend.url, backend.data_dir)
    try:
        assert current_revisions(engine) == frozenset()
    finally:
        engine.dispose()
    backend.open().close()
    engine = engine_for(backend.url, backend.data_dir)
    try:
        assert current_revisions(engine) == {HEAD_REVISION}
    finally:
        engine.dispose()


def test_an_older_revision_is_refused_until_upgraded(backend: Any) -> None:
    from alembic import command

    engine = engine_for(backend.url, backend.data_dir)
    try:
        with engine.begin() as connection:
            command.upgrade(_alembic_config(connection, {}), "0005")
    finally:
        engine.dispose()

    with pytest.raises(SchemaOutdatedError, match=r"at revision 0005; run `nrllm db upgrade`"):
        backend.open()

    store = Store.connect(backend.url, data_dir=backend.data_dir)
    try:
        store.upgrade()
    finally:
        store.close()
    store = backend.open()
    try:
        assert current_revisions(store._engine) == {HEAD_REVISION}
    finally:
        store.close()


def test_a_newer_unknown_revision_is_refused(backend: Any) -> None:
    store = backend.open()
    with store._engine.begin() as connection:
        connection.execute(text("UPDATE alembic_version SET version_num = '0999'"))
    store.close()

    with pytest.raises(SchemaOutdatedError, match=r"at revision 0999; run `nrllm db upgrade`"):
        backend.open()
