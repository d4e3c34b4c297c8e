"""Recording trials in the Optuna study: what ran, how it ended, and its evidence.

What the optimizer is told depends on whose fault a failure was:

* the configuration's fault: PRUNED with the constraint ``failed = 1`` so the sampler
  learns the region is infeasible (a FAIL trial is invisible to TPE, which would propose
  the crashing configuration again and again);
* the infrastructure's fault, or an interruption: FAIL (the caller re-queues the params).

Every write goes through Optuna's public API (Trial, Study.tell, and the storage's own
methods for trials this process did not ask for), with the keys of results/attrs.py.
Secrets never reach the storage or the artifact store: every text is scrubbed first.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import optuna
from optuna.artifacts import upload_artifact
from optuna.artifacts._protocol import ArtifactStore
from optuna.distributions import BaseDistribution
from optuna.trial import FrozenTrial, Trial, TrialState

from sweeper.launch import LaunchConfig
from sweeper.measure.levels import objective_figures
from sweeper.measure.stats import Ratio, summarize
from sweeper.remote.server import ServerHandle
from sweeper.results import attrs as A
from sweeper.run import heartbeat, pending
from sweeper.run.trial import Measurement
from sweeper.study.base import public_url
from sweeper.study.objective import Objective

MESSAGE_CHARS = 500
LOG_TAIL_CHARS = 4000


@dataclass(frozen=True)
class Slot:
    """A trial being recorded: its number, its storage id, and the Trial object when this
    process asked for it (constraints are set through it)."""

    number: int
    trial_id: int
    trial: Trial | None = None


class Recorder:
    def __init__(self, study: optuna.Study, storage: optuna.storages.BaseStorage,
                 artifacts: ArtifactStore, scrub: Callable[[str], str],
                 storage_url: str = "", goal: Objective | None = None) -> None:
        self.study = study
        self.goal = goal or Objective("at", (1,), at=1)
        self.storage = storage
        self.artifacts = artifacts
        self.scrub = scrub
        self.storage_url = storage_url
        self._study_id = storage.get_study_id_from_name(study.study_name)
        # what this process wrote to each trial, so that a measurement whose recording
        # fails is kept whole (run/pending.py)
        self._written: dict[int, dict[str, Any]] = {}
        self._started: dict[int, datetime] = {}

    # --- slots -------------------------------------------------------------------------
    def slot(self, trial: Trial) -> Slot:
        return Slot(trial.number, self._trial_id(trial.number), trial)

    def slot_of(self, number: int) -> Slot:
        return Slot(number, self._trial_id(number))

    def _trial_id(self, number: int) -> int:
        return self.storage.get_trial_id_from_study_id_trial_number(self._study_id, number)

    def new_running(self, params: dict[str, Any], distributions: dict[str, BaseDistribution],
                    user_attrs: dict[str, Any], *, ends_here: bool = False) -> Slot:
        """A trial of fixed parameters, RUNNING from now (its duration is real), that the
        sampler never proposed (a confirm-phase measurement). ``ends_here``: it is run as
        a Trial, whose end (``_end``) sets its constraint: Optuna keeps a constraint's
        first value and warns at a second, so the template sets none (a group's
        baseline, which may fail)."""
        template = FrozenTrial(
            number=-1, state=TrialState.RUNNING, value=None, datetime_start=datetime.now(),
            datetime_complete=None, params=params, distributions=distributions,
            user_attrs={A.OWNER: heartbeat.me(), A.HEARTBEAT: time.time(), **user_attrs},
            system_attrs={}, intermediate_values={}, trial_id=-1)
        if not ends_here:
            template.set_constraint("failed", 0.0)
        trial_id = self.storage.create_new_trial(self._study_id, template_trial=template)
        return Slot(self.storage.get_trial(trial_id).number, trial_id)

    def set(self, slot: Slot, **values: Any) -> None:
        if slot.trial is not None and slot.trial_id not in self._written:
            # the first write to a trial this process asked for names its owner (and a
            # first beat, run/heartbeat.py): until then it is owner-less, which the other
            # sweepers sharing the storage take for an orphan once that lasts
            values = {A.OWNER: heartbeat.me(), A.HEARTBEAT: time.time(), **values}
        self._written.setdefault(slot.trial_id, {}).update(values)
        self._started.setdefault(slot.trial_id, datetime.now())
        for key, value in values.items():
            self.storage.set_trial_user_attr(slot.trial_id, key, value)

    # --- the start of a trial ----------------------------------------------------------
    def begin(self, slot: Slot, *, role: str, config: LaunchConfig,
              effective: dict[str, Any], command: str) -> None:
        self.set(slot, **{
            A.ROLE: role, A.CONFIG_ID: config.config_id(), A.EFFECTIVE: effective,
            A.LAUNCH: {**config.to_dict(redact=True), "command": command},
            A.OWNER: heartbeat.me(),
        })

    def server_started(self, slot: Slot, handle: ServerHandle) -> None:
        """Before the sweeper waits on a server: a kill -9 from here on leaves a record."""
        self.set(slot, **{A.SERVER: handle.to_attrs()})

    # --- how it ended --------------------------------------------------------------------
    def prune(self, slot: Slot, kind: str, message: str, *, log_tail: str = "",
              log: str | None = None, skipped: bool = False) -> None:
        """The configuration's fault (or predicted to be): PRUNED + infeasible."""
        values: dict[str, Any] = {A.CONSTRAINT_MIRROR: 1.0, A.FAILURE: kind,
                                  A.FAILURE_MSG: self.scrub(message)[:MESSAGE_CHARS]}
        if skipped:
            values[A.SKIPPED] = True
        if log_tail:
            values[A.LOG_TAIL] = self.scrub(log_tail)[-LOG_TAIL_CHARS:]
        self._end(slot, values, TrialState.PRUNED, None, 1.0, [self._log_artifact(slot, log)])

    def repeat(self, slot: Slot, value: float, of: list[int]) -> None:
        """An accidental repeat of a measured configuration, resolved without a restart:
        the sampler is told the mean of what the earlier trials were told."""
        if slot.trial is not None:
            slot.trial.set_constraint("failed", 0.0)
        self.set(slot, **{A.CONSTRAINT_MIRROR: 0.0, A.REPEAT_OF: list(of)})
        self.study.tell(slot.number, value)

    def fail(self, slot: Slot, kind: str, message: str, *, log: str | None = None) -> None:
        """Not the configuration's fault: FAIL (the caller re-queues the parameters)."""
        self.set(slot, **{A.FAILURE: kind, A.FAILURE_MSG: self.scrub(message)[:MESSAGE_CHARS]})
        self.upload_log(slot, log)
        self.study.tell(slot.number, state=TrialState.FAIL, skip_if_finished=True)

    def complete(self, slot: Slot, m: Measurement, *, log: str | None = None,
                 speedup: Ratio | None = None, extra: dict[str, Any] | None = None) -> None:
        """Measured: the runs, their summary, accept length, evidence; then the value.
        With several concurrency levels the runs are the objective's per-run series, and
        every level's figures are kept beside them."""
        result = m.bench
        levels, series, told = self._figures(m)
        st = summarize(series)
        values: dict[str, Any] = {
            A.CONSTRAINT_MIRROR: 0.0,
            A.RUNS: series,
            A.STARTUP: round(m.startup_s, 2),
            A.TOK_S_MEAN: st.mean, A.TOK_S_STDEV: st.stdev, A.TOK_S_MIN: st.min,
            A.TOK_S_MAX: st.max, A.TOK_S_CI95: [st.ci_low, st.ci_high],
            A.RUNS_FLAGGED: result.n_errors + result.n_short,
            A.ACCEPT: result.accept_length,
            **(extra or {}),
        }
        if len(levels) == 1 and any(p is not None for p in result.counted_positions):
            values[A.RUN_POSITIONS] = result.counted_positions  # aligned with A.RUNS
        if len(levels) > 1 or self.goal.multi:
            values[A.LEVELS] = {str(c): lv for c, lv in levels.items()}
            values[A.OBJECTIVE_VALUES] = told
            for c, lv in levels.items():
                values[A.per_request_key(c)] = (lv["per_request"] or {}).get("mean")
                values[A.total_key(c)] = (lv["total"] or {}).get("mean")
        if m.decode.n_lines:
            values[A.ACCEPT_LOG] = m.decode.accept_len
            values[A.DECODE_LINES] = m.decode.n_lines
            if m.decode.eager_lines:  # batches above --cuda-graph-max-bs ran without graphs
                values[A.DECODE_EAGER] = m.decode.eager_lines
        if speedup is not None:
            values[A.SPEEDUP] = speedup.ratio
        evidence = result.to_dict() if len(m.levels) < 2 else \
            {str(c): r.to_dict() for c, r in m.levels.items()}
        self._end(slot, values, TrialState.COMPLETE, told if self.goal.multi else told[:1], 0.0,
                  [self._json_artifact("benchmark.json", evidence), self._log_artifact(slot, log)])

    def _end(self, slot: Slot, values: dict[str, Any], state: TrialState,
             objective: list[float] | None, constraint: float,
             artifacts: list[dict[str, str] | None]) -> None:
        """The last writes of a trial that was measured (or failed on its own). When the
        storage fails here, the trial as it would have been stored is kept on local disk
        for the next run (run/pending.py) and StorageFault says where."""
        kept = [a for a in artifacts if a is not None]
        self._written.setdefault(slot.trial_id, {}).update(values)  # kept even if none lands
        try:
            if slot.trial is not None:
                slot.trial.set_constraint("failed", constraint)
            self.set(slot, **values)
            for a in kept:
                self._upload(slot, a["name"], a["text"], a["mimetype"])
            if state == TrialState.COMPLETE:
                assert objective is not None
                self.study.tell(slot.number, objective if len(objective) > 1 else objective[0])
            else:
                self.study.tell(slot.number, state=state)
            # tell can return without keeping anything (Optuna swallows an integrity error):
            # only the trial read back says the measurement is stored
            pending.stored_as(self.storage, slot.trial_id, state,
                              objective if state == TrialState.COMPLETE else None)
        except Exception as exc:
            if not pending.is_storage_error(exc):
                raise
            raise self._keep(slot, state, objective, constraint, kept, exc) from exc

    def _keep(self, slot: Slot, state: TrialState, objective: list[float] | None,
              constraint: float, artifacts: list[dict[str, str]],
              exc: BaseException) -> pending.StorageFault:
        if slot.trial is not None:
            params, dists = slot.trial.params, slot.trial.distributions
        else:  # a confirm measurement: its parameters were stored when it began
            frozen = self.storage.get_trial(slot.trial_id)
            params, dists = frozen.params, frozen.distributions
        record = pending.Pending.of(
            self.study.study_name, slot.number, state, objective, params, dists,
            self._written.get(slot.trial_id, {}), constraint,
            self._started.get(slot.trial_id), artifacts)
        where = pending.save(self.storage_url, record)
        shown = public_url(self.storage_url) if self.storage_url else "the study's storage"
        kept = (f"the measurement is kept in {where} and written in by the next run: fix "
                "the storage, then run the same command" if where is not None else
                "the measurement could not be kept anywhere on local disk either (lost)")
        return pending.StorageFault(f"storage {shown} failed while recording trial "
                                    f"{slot.number} ({pending.cause_of(exc)}); the server "
                                    f"was stopped; {kept}", kept=where)

    def _figures(self, m: Measurement) -> tuple[dict[int, dict[str, Any]], list[float],
                                                 list[float]]:
        return objective_figures(m.levels or {self.goal.primary: m.bench}, self.goal,
                                 m.bench.spec.aggregate)

    def series(self, m: Measurement) -> list[float]:
        """The objective's per-run series of a measurement (what ``complete`` records as
        the trial's runs): per-request tok/s combined over the levels, run by run."""
        return self._figures(m)[1]

    # --- artifacts ----------------------------------------------------------------------
    def upload_json(self, slot: Slot, name: str, data: dict[str, Any]) -> None:
        a = self._json_artifact(name, data)
        self._upload(slot, a["name"], a["text"], a["mimetype"])

    def upload_log(self, slot: Slot, text: str | None) -> None:
        a = self._log_artifact(slot, text)
        if a is not None:
            self._upload(slot, a["name"], a["text"], a["mimetype"])

    def _json_artifact(self, name: str, data: dict[str, Any]) -> dict[str, str]:
        return {"name": name, "text": self.scrub(json.dumps(data, indent=2, default=str)),
                "mimetype": "application/json"}

    def _log_artifact(self, slot: Slot, text: str | None) -> dict[str, str] | None:
        """The server's log, scrubbed, served by the dashboard as text (not a download)."""
        if text is None:
            return None
        return {"name": f"server-trial-{slot.number:04d}.log", "text": self.scrub(text),
                "mimetype": "text/plain"}

    def upload_to(self, trial_id: int, artifact: dict[str, str]) -> None:
        """A kept artifact written in by a later run (run/pending.py)."""
        self._upload(Slot(-1, trial_id), artifact["name"], artifact["text"],
                     artifact["mimetype"])

    def upload_study_json(self, name: str, data: dict[str, Any]) -> None:
        """A study-level artifact (the dashboard lists it on the study's page)."""
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / name
            path.write_text(self.scrub(json.dumps(data, indent=2, default=str)), "utf-8")
            upload_artifact(artifact_store=self.artifacts, file_path=str(path),
                            study_or_trial=self.study, mimetype="application/json")

    def _upload(self, slot: Slot, name: str, text: str, mimetype: str) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / name
            path.write_text(text, encoding="utf-8")
            upload_artifact(artifact_store=self.artifacts, file_path=str(path),
                            study_or_trial=self.storage.get_trial(slot.trial_id),
                            storage=self.storage, mimetype=mimetype)
