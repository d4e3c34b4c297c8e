"""A throwaway PostgreSQL database on the server at 127.0.0.1:5432 (`make test` starts one
when none answers), created for a test and dropped afterwards, also when the test fails."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

SERVER = "postgresql://postgres@127.0.0.1:5432"


@pytest.fixture
def pg_url() -> Iterator[str]:
    psycopg = pytest.importorskip("psycopg")
    name = f"sweeper_test_{uuid.uuid4().hex[:12]}"
    try:
        admin = psycopg.connect(f"{SERVER}/postgres", autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        pytest.skip(f"no PostgreSQL on 127.0.0.1:5432 ({exc}); `make test` starts one")
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{SERVER}/{name}"
    finally:
        with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
