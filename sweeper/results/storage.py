"""The study's storage: Optuna's RDB (SQLite by default) or journal storage, its
artifact store, and the guard that refuses a study file whose search space no longer
matches what the storage already holds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import optuna
from optuna.artifacts import FileSystemArtifactStore
from optuna.artifacts._protocol import ArtifactStore
from optuna.distributions import FloatDistribution, IntDistribution, distribution_to_json

from sweeper.errors import InputError
from sweeper.results import attrs as A
from sweeper.study.base import public_url, storage_key
from sweeper.study.objective import Objective


def open_storage(url: str) -> optuna.storages.BaseStorage:
    """An Optuna storage for ``url``; InputError (one line) when it cannot be used.

    ``journal:///path/file.log`` selects Optuna's JournalFileBackend (many local
    processes on a shared file system); everything else goes to SQLAlchemy.
    """
    try:
        if url.startswith("journal://"):
            from optuna.storages.journal import JournalFileBackend, JournalStorage

            path = url[len("journal://"):]
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            return JournalStorage(JournalFileBackend(path))
        if url.startswith("sqlite:///"):
            db = Path(url[len("sqlite:///"):])
            if not db.parent.exists():
                raise InputError(f"storage {public_url(url)}: directory {db.parent} does not "
                                 "exist; create it or pass another --storage")
        return _rdb_storage(url)
    except InputError:
        raise
    except Exception as exc:  # SQLAlchemy raises many types for a bad URL or server
        raise _cannot_open(url, exc) from exc


def _cannot_open(url: str, exc: Exception) -> InputError:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    shown = public_url(url)
    first = first.replace(url, shown)
    return InputError(f"storage {shown}: cannot open it ({first}); check --storage or the "
                      "study's storage key")


def peek(url: str, name: str) -> tuple[str, optuna.Study | None]:
    """What ``validate`` says of storage ``url`` for study ``name``, creating nothing (no
    file, no table, no study: ``optimize`` would): a phrase, and the stored study when there
    is one. InputError (one line) when ``optimize`` could not use it."""
    for prefix in ("sqlite:///", "journal://"):
        path = Path(url[len(prefix):])
        if url.startswith(prefix) and not path.exists():
            if prefix == "sqlite:///" and not path.parent.is_dir():
                raise InputError(f"storage {public_url(url)}: directory {path.parent} does not "
                                 "exist; create it or pass another --storage")
            return "a new file (optimize creates it)", None
    if not url.startswith("journal://") and not _has_optuna_tables(url):
        return "reachable, no Optuna tables yet (optimize creates them)", None
    study = existing_study(open_storage(url), name)
    if study is None:
        return f"reachable, no study {name!r} in it yet", None
    n = len(study.get_trials(deepcopy=False))
    return f"holds study {name!r} ({n} trial{'' if n == 1 else 's'}; optimize adds to it)", \
        study


def _has_optuna_tables(url: str) -> bool:
    """Connected with SQLAlchemy alone: Optuna's RDBStorage would create its tables."""
    import sqlalchemy

    try:
        engine = sqlalchemy.create_engine(
            _sqlalchemy_url(url),
            # a database host that drops packets: an answer in seconds, not minutes
            connect_args={} if url.startswith("sqlite") else {"connect_timeout": 10})
        try:
            with engine.connect() as conn:
                return sqlalchemy.inspect(conn).has_table("studies")
        finally:
            engine.dispose()
    except Exception as exc:  # a bad URL, a refused connection, a file that is no database
        raise _cannot_open(url, exc) from exc


def _sqlalchemy_url(url: str) -> str:
    """``postgresql://`` names psycopg 3 (the driver sweeper installs); SQLAlchemy's
    default for that scheme is psycopg2, which is not installed."""
    if url.startswith("postgresql://"):
        return "postgresql+psycopg://" + url[len("postgresql://"):]
    return url


def _rdb_storage(url: str) -> optuna.storages.RDBStorage:
    """RDBStorage, retried briefly: two processes opening a new SQLite file at once (a
    sweep starting while `status` or the dashboard looks) race to create the schema, and
    the loser sees an IntegrityError or "database is locked" that a retry resolves."""
    import sqlalchemy.exc
    from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_fixed

    for attempt in Retrying(stop=stop_after_attempt(5), wait=wait_fixed(0.3), reraise=True,
                            retry=retry_if_exception_type((sqlalchemy.exc.IntegrityError,
                                                           sqlalchemy.exc.OperationalError))):
        with attempt:
            return optuna.storages.RDBStorage(_sqlalchemy_url(url),
                                              engine_kwargs=_engine_kwargs(url))
    raise AssertionError("unreachable")


def storage_exists(url: str) -> bool:
    """False only when a file-backed storage has no file yet (nothing to read)."""
    for prefix in ("sqlite:///", "journal://"):
        if url.startswith(prefix):
            return Path(url[len(prefix):]).exists()
    return True


def _engine_kwargs(url: str) -> dict[str, Any]:
    if url.startswith("sqlite"):
        # A dashboard or `sweeper status` may read while the sweep writes: wait for the
        # lock instead of failing with "database is locked".
        return {"connect_args": {"timeout": 30}}
    # a server that restarted or dropped an idle connection between two trials
    return {"pool_pre_ping": True}


def artifact_dir(url: str, study_name: str, artifacts: str | None = None) -> Path:
    """Where one study's trial artifacts (server logs, benchmark JSON) live. ``artifacts``
    (the study file's ``artifacts:``, a folder every machine sharing the storage reaches):
    a folder of this storage and study in it. Else beside a SQLite or journal file, in a
    folder of that file's own (``studies/demo.artifacts/demo/``), so two storage files in
    one folder never share it; else ``studies/<study>-<hash>.artifacts`` keyed by the
    storage URL, under the current folder (``shared_without_store`` says so)."""
    key = storage_key(url, study_name)
    if artifacts is not None:
        return Path(artifacts) / key
    for prefix in ("sqlite:///", "journal://"):
        if url.startswith(prefix):
            db = Path(url[len(prefix):])
            return db.parent / f"{db.stem}.artifacts" / study_name
    return Path("studies") / f"{key}.artifacts"


def shared_without_store(url: str, artifacts: str | None) -> str | None:
    """The note for a storage other machines share (a database server) with no artifact
    store configured: its artifacts land under this machine's current folder."""
    if artifacts is not None or url.startswith(("sqlite:///", "journal://")):
        return None
    return (f"note: {public_url(url)} can be shared by several machines, but the trials' "
            f"artifacts (server logs, benchmark JSON) go to ./studies/ on this one, where the "
            "others' dashboards cannot read them; set `artifacts: /a/shared/folder` (or an "
            "s3:// URL) in the study file")


def report_dir(url: str, study_name: str) -> Path:
    """Where ``sweeper report`` writes by default: beside the storage file
    (``studies/demo-report/`` for the demo)."""
    for prefix in ("sqlite:///", "journal://"):
        if url.startswith(prefix):
            return Path(url[len(prefix):]).parent / f"{study_name}-report"
    return Path("studies") / f"{study_name}-report"


def artifact_store(url: str, study_name: str, artifacts: str | None = None) -> ArtifactStore:
    """The study's artifact store: an S3 prefix through Optuna's Boto3ArtifactStore for an
    ``s3://bucket/prefix`` ``artifacts:``, else a folder (artifact_dir)."""
    if artifacts is not None and artifacts.startswith("s3://"):
        from optuna.artifacts import Boto3ArtifactStore

        bucket, _, prefix = artifacts[len("s3://"):].partition("/")
        return _Prefixed(Boto3ArtifactStore(bucket),
                         f"{prefix.rstrip('/')}/{storage_key(url, study_name)}".lstrip("/"))
    path = artifact_dir(url, study_name, artifacts)
    path.mkdir(parents=True, exist_ok=True)
    return FileSystemArtifactStore(str(path))


class _Prefixed:
    """An artifact store whose ids live under ``prefix/`` (one S3 bucket, many studies)."""

    def __init__(self, inner: Any, prefix: str) -> None:
        self.inner, self.prefix = inner, prefix

    def open_reader(self, artifact_id: str) -> Any:
        return self.inner.open_reader(f"{self.prefix}/{artifact_id}")

    def write(self, artifact_id: str, content_body: Any) -> None:
        self.inner.write(f"{self.prefix}/{artifact_id}", content_body)

    def remove(self, artifact_id: str) -> None:
        self.inner.remove(f"{self.prefix}/{artifact_id}")


def _short(dist: optuna.distributions.BaseDistribution) -> str:
    """``int 1..6``, ``float 0.5..0.9 log``, ``choices 1|2|4``: exact, and short enough for
    the dashboard's table of study attributes."""
    if isinstance(dist, optuna.distributions.CategoricalDistribution):
        return "choices " + "|".join(json.dumps(c) for c in dist.choices)
    if isinstance(dist, IntDistribution | FloatDistribution):
        kind = "int" if isinstance(dist, IntDistribution) else "float"
        step = f" step {dist.step}" if dist.step not in (None, 1) else ""
        return f"{kind} {dist.low}..{dist.high}{step}{' log' if dist.log else ''}"
    return distribution_to_json(dist)


def space_signature(distributions: dict[str, optuna.distributions.BaseDistribution]) -> str:
    return json.dumps({k: _short(v) for k, v in sorted(distributions.items())}, sort_keys=True)


def existing_study(storage: optuna.storages.BaseStorage, name: str) -> optuna.Study | None:
    try:
        return optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        return None


def check_space(study: optuna.Study, signature: str, study_file: str, storage_url: str) -> None:
    """Refuse to mix trials of two different search spaces in one study."""
    stored = study.user_attrs.get(A.SPACE)
    if stored is not None and stored != signature:
        old, new = json.loads(stored), json.loads(signature)
        changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        if any("|topk=" in k and ",steps=" in k for k in old):
            # made before draft tokens got one shared parameter (space.DRAFT_POSITION)
            raise InputError(
                f"{study_file}: study {study.study_name!r} in {public_url(storage_url)} was "
                "made by an older sweeper that sampled draft tokens per (topk, steps) branch; "
                "its trials stay readable (status, report, export, dashboard) but cannot be "
                "resumed: give the study a new name, or use --fresh to start it again")
        raise InputError(
            f"{study_file}: space: differs from the study {study.study_name!r} already in "
            f"{public_url(storage_url)} (changed: {', '.join(changed)}); use a new study name, "
            "another --storage, or restore the old space")


def check_objective(study: optuna.Study, goal: Objective, study_file: str,
                    storage_url: str) -> None:
    """Refuse a study file whose levels or objective differ from the stored study's: its
    trials' values would mean another thing (and Optuna's directions are fixed)."""
    raw = study.user_attrs.get(A.OBJECTIVE)
    if raw is None and A.SPACE in study.user_attrs:
        raw = Objective("at", (1,), at=1).signature()  # stored before levels existed
    if raw is None:
        return
    stored = Objective.from_signature(raw)
    if stored.signature() != goal.signature():
        key = "benchmark.concurrency" if stored.levels != goal.levels else "objective"
        raise InputError(
            f"{study_file}: {key}: differs from the study {study.study_name!r} already in "
            f"{public_url(storage_url)} ({goal.describe_change(stored)}); use a new study "
            "name, another --storage, or restore the old setting")


def delete_study(url: str, name: str, artifacts: str | None = None) -> None:
    """Remove a study and its artifacts (``--fresh``): that study's, in that storage only
    (an S3 store keeps its objects: nothing there is found by folder)."""
    import shutil

    storage = open_storage(url)
    if existing_study(storage, name) is not None:
        optuna.delete_study(study_name=name, storage=storage)
    if artifacts is None or not artifacts.startswith("s3://"):
        shutil.rmtree(artifact_dir(url, name, artifacts), ignore_errors=True)


def load_existing(url: str, name: str, study_file: str,
                  own_storage: str | None = None) -> optuna.Study:
    """The stored study for the read-only commands (status, export, dashboard, report);
    InputError when the sweep never ran. A storage file that does not exist is not created.
    ``own_storage``: the study file's storage, to leave ``--storage`` out of the hint when
    ``url`` is that one."""
    study = existing_study(open_storage(url), name) if storage_exists(url) else None
    if study is None:
        raise InputError(f"{study_file}: no study {name!r} in {public_url(url)} yet; run "
                         f"`{optimize_command(study_file, url, own_storage)}` first")
    return study


def optimize_command(study_file: str, url: str, own_storage: str | None) -> str:
    """``sweeper optimize`` for this study file and storage, run as printed from here: the
    study by name when it is one of studies/ (how ``--study NAME`` finds it), else by its
    path; ``--storage`` unless it is the study file's own. Not ``--study NAME`` for a file
    elsewhere: that runs the built-in study of that name, into another storage."""
    import shlex

    path = Path(study_file)
    study = path.stem if path.parent == Path("studies") and path.suffix == ".yaml" \
        else study_file
    words = ["sweeper", "optimize", "--study", study]
    if own_storage is None or url != own_storage:
        words += ["--storage", public_url(url)]
    return shlex.join(words)
