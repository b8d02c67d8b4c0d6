"""The sample database: generated, never committed, created on first use in the data folder."""

from __future__ import annotations

from nrllm_builtin.sample import create_sample_database


def test_default_records_url_creates_the_sample_in_the_data_folder(call, tmp_path, monkeypatch):
    monkeypatch.setenv("NRLLM_HOME", str(tmp_path))

    answer = call("read_records", {"table": "pages", "columns": ["title"]}, {})

    assert (tmp_path / "builtin-sample.db").is_file()
    assert answer.table()["rows"] == [["1", "Home"], ["2", "About us"], ["3", "Contact"]]


def test_create_sample_database_replaces_an_existing_file(tmp_path):
    target = tmp_path / "deep" / "sample.db"
    target.parent.mkdir()
    target.write_bytes(b"not a database")

    assert create_sample_database(target) == target
    assert target.read_bytes().startswith(b"SQLite format 3")
    assert sorted(p.name for p in target.parent.iterdir()) == ["sample.db"]


def test_the_sample_holds_secret_shaped_fakes_the_tools_never_show(call, tmp_path):
    path = create_sample_database(tmp_path / "s.db")
    settings = {"records_url": f"sqlite+pysqlite:///{path}", "read_tables": ["users", "pages"]}

    answer = call("search_records", {"term": "FAKE"}, settings)

    assert answer.content == "No matches for 'FAKE'."
