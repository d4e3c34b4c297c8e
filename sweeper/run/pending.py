"""Measurements the storage could not take: kept on local disk, written in by the next run.

A measurement costs minutes of a GPU node. When the storage fails at the moment of
recording one (a full disk, a file made read-only, a database server gone), the trial as it
would have been stored (its state, value, attributes, constraint and evidence) is written as
one JSON file to the first place that takes it: a folder beside a file storage, else the
user's state folder (a full disk beside the storage must not lose it). The next run of the
same study and storage writes each one in as a finished trial, before anything else, and
marks the trial the failed process left RUNNING as FAIL (not re-queued: it was measured).

Optuna's storages have no write-ahead journal of their own for this (RDBStorage retries a
transaction, then raises), hence this small one.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import (
    BaseDistribution,
    distribution_to_json,
    json_to_distribution,
)
from optuna.trial import FrozenTrial, TrialState

from sweeper.errors import StorageFault
from sweeper.results.attrs import REPLAY_ID, REPLAYED_FROM
from sweeper.study.base import public_url

# errno values that mean "the storage cannot be written", not "a bug": an OSError with
# another errno is not a storage fault and keeps its traceback.
STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EACCES,
                            errno.EPERM})


class NotStored(Exception):
    """A write the storage answered without an error but did not keep: read back, the trial
    is not what was written (Optuna's RDB storage returns False from a finishing write on an
    integrity error instead of raising)."""


def is_storage_error(exc: BaseException) -> bool:
    """An exception that a failing storage raises (SQLAlchemy through Optuna, or a file)."""
    import sqlalchemy.exc

    if isinstance(exc, NotStored):
        return True
    if isinstance(exc, optuna.exceptions.StorageInternalError | sqlalchemy.exc.SQLAlchemyError):
        return True
    return isinstance(exc, OSError) and exc.errno in STORAGE_ERRNOS


def stored_as(storage: optuna.storages.BaseStorage, trial_id: int, state: TrialState,
              values: list[float] | None) -> FrozenTrial:
    """Read the trial back: raise NotStored unless it holds ``state`` and ``values``."""
    got = storage.get_trial(trial_id)
    if got.state != state:
        raise NotStored(f"the storage did not take the write: trial {got.number} is "
                        f"{got.state.name}, not {state.name}")
    if values is not None and [float(v) for v in (got.values or [])] != \
            [float(v) for v in values]:
        raise NotStored(f"the storage did not take the write: trial {got.number} holds "
                        f"the values {got.values}, not {values}")
    return got


def cause_of(exc: BaseException) -> str:
    """The storage's own words, one line ("disk I/O error", "database or disk is full")."""
    if isinstance(exc, NotStored):
        return str(exc)
    seen: BaseException | None = exc
    while seen is not None:
        orig = getattr(seen, "orig", None)  # SQLAlchemy's DBAPI error
        if orig is not None:
            return str(orig).strip().splitlines()[0]
        if isinstance(seen, OSError) and seen.strerror:
            return seen.strerror
        seen = seen.__cause__ or seen.__context__
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


@dataclass
class Pending:
    """One trial as it would have been stored."""

    study: str
    number: int  # the trial the measurement was made for (left RUNNING by the failure)
    state: str  # a TrialState name: COMPLETE or PRUNED
    values: list[float] | None
    params: dict[str, Any]
    distributions: dict[str, str]  # distribution_to_json
    user_attrs: dict[str, Any]
    constraint: float
    started: str
    artifacts: list[dict[str, str]] = field(default_factory=list)  # name, text, mimetype
    rid: str = field(default_factory=lambda: uuid.uuid4().hex)  # a replay writes it once

    @classmethod
    def of(cls, study: str, number: int, state: TrialState, values: list[float] | None,
           params: dict[str, Any], distributions: dict[str, BaseDistribution],
           user_attrs: dict[str, Any], constraint: float, started: datetime | None,
           artifacts: list[dict[str, str]]) -> Pending:
        return cls(study, number, state.name, values, dict(params),
                   {k: distribution_to_json(d) for k, d in distributions.items()},
                   json.loads(json.dumps(user_attrs, default=str)), constraint,
                   (started or datetime.now()).isoformat(), artifacts)

    def frozen(self) -> FrozenTrial:
        """A template for ``storage.create_new_trial``: RUNNING, so that its artifacts can
        still be attached; ``finish`` then gives it its state and value."""
        trial = FrozenTrial(
            number=-1, state=TrialState.RUNNING, value=None,
            datetime_start=datetime.fromisoformat(self.started), datetime_complete=None,
            params=self.params,
            distributions={k: json_to_distribution(v) for k, v in self.distributions.items()},
            user_attrs={**self.user_attrs, REPLAY_ID: self.rid, REPLAYED_FROM: self.number},
            system_attrs={}, intermediate_values={}, trial_id=-1)
        trial.set_constraint("failed", self.constraint)
        return trial

    def finish(self, storage: optuna.storages.BaseStorage, trial_id: int) -> None:
        storage.set_trial_state_values(trial_id, TrialState[self.state],
                                       self.values if self.state == "COMPLETE" else None)


def state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return Path(base) / "sweeper"


def _key(storage_url: str, study: str) -> str:
    # the URL may hold a password: only its hash names the folder
    return hashlib.sha256(f"{storage_url}\0{study}".encode()).hexdigest()[:16]


def locations(storage_url: str, study: str) -> list[Path]:
    """Where pending measurements of this study and storage go, in order of preference."""
    found: list[Path] = []
    for prefix in ("sqlite:///", "journal://"):
        if storage_url.startswith(prefix):
            db = Path(storage_url[len(prefix):])
            found.append(db.parent / f".{db.name}.pending" / _key(storage_url, study))
    found.append(state_dir() / "pending" / _key(storage_url, study))
    return found


def save(storage_url: str, record: Pending) -> Path | None:
    """Write ``record`` to the first location that takes it; None when none did."""
    text = json.dumps(asdict(record), default=str)
    for folder in locations(storage_url, record.study):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".json")
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            final = folder / f"trial-{record.number:04d}.json"
            os.replace(tmp, final)
            return final
        except OSError:
            continue
    return None


def load(storage_url: str, study: str) -> list[tuple[Path, Pending]]:
    found = []
    for folder in locations(storage_url, study):
        for path in sorted(folder.glob("trial-*.json")) if folder.is_dir() else []:
            try:
                found.append((path, Pending(**json.loads(path.read_text("utf-8")))))
            except (OSError, ValueError, TypeError):
                continue  # a torn or foreign file: left for the user, never guessed at
    return found


def replay(study: optuna.Study, storage: optuna.storages.BaseStorage, storage_url: str,
           upload: Callable[[int, dict[str, str]], None],
           mark_replayed: Callable[[int, int], None], line: Callable[[str], None]) -> int:
    """Write every pending measurement of this study into the storage. ``upload(trial_id,
    artifact)`` stores one artifact; ``mark_replayed(old_number, new_number)`` ends the
    trial the failed run left RUNNING. Returns how many were written.

    A replay is found again by its id (``REPLAY_ID``): one that an earlier run created but
    could not finish (a storage that took the small writes, not the value) is finished
    here, never created twice. The file is deleted only once the trial, read back, is
    finished with its values."""
    done = 0
    study_id = storage.get_study_id_from_name(study.study_name)
    written = {t.user_attrs.get(REPLAY_ID): t
               for t in study.get_trials(deepcopy=False) if REPLAY_ID in t.user_attrs}
    for path, record in load(storage_url, study.study_name):
        state = TrialState[record.state]
        values = record.values if record.state == "COMPLETE" else None
        earlier = written.get(record.rid)
        if earlier is not None and earlier.state.is_finished() and earlier.state != state:
            earlier = None  # closed by someone else before it was finished: write it anew
        try:
            if earlier is not None:  # created by an earlier run: finished, or half-written
                trial_id = storage.get_trial_id_from_study_id_trial_number(study_id,
                                                                           earlier.number)
            else:
                trial_id = storage.create_new_trial(study_id, template_trial=record.frozen())
            number = storage.get_trial(trial_id).number
            if earlier is None or earlier.state != state:
                _upload_missing(storage, trial_id, record, upload)
                record.finish(storage, trial_id)
            stored_as(storage, trial_id, state, values)
            mark_replayed(record.number, number)
        except Exception as exc:
            if is_storage_error(exc):
                raise StorageFault(
                    f"storage {public_url(storage_url)} still fails ({cause_of(exc)}); the "
                    f"measurement of trial {record.number} stays in {path}: fix the storage, "
                    "then run the same command again", kept=path) from exc
            raise
        path.unlink(missing_ok=True)
        if earlier is not None and earlier.state == state:
            continue  # written by a run that stopped before removing the file
        done += 1
        line(f"trial {record.number}: its measurement, kept on disk when the storage failed, "
             f"is now trial {number}")
    return done


def _upload_missing(storage: optuna.storages.BaseStorage, trial_id: int, record: Pending,
                    upload: Callable[[int, dict[str, str]], None]) -> None:
    """The kept artifacts the trial does not hold yet (a half-written replay may hold some)."""
    from optuna.artifacts import get_all_artifact_meta

    have = {m.filename for m in get_all_artifact_meta(storage.get_trial(trial_id),
                                                      storage=storage)}
    for artifact in record.artifacts:
        if artifact["name"] not in have:
            upload(trial_id, artifact)
