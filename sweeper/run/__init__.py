"""Running a sweep: the trial loop and everything around it.

One loop (``workers.HostPool``) drives every sweep, on one host or many: it asks the study
for a trial (the only place in sweeper that asks Optuna for one), lets ``decide.decide`` say
what happens to the proposal (measure, replicate, skip a known failure, answer an accidental
repeat, stop), measures through ``measurer.Measurer`` (``trial.TrialRunner`` on a real host)
and records through ``record.Recorder``. ``session.HostSession`` is one host's hold on the
study (checks, lock, strays, keep-best); ``confirm`` re-measures the leaders after the loop;
``reconcile``, ``pending``, ``lock`` and ``servers`` make sure nothing is lost or left
running whatever kills a sweep.
"""
