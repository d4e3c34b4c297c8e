"""What to try next: the study's space, its samplers, and the failures to avoid.

``space.SearchSpace`` maps Optuna's parameters to the configuration SGLang would run (its
speculative rules applied) and back; ``sampler.make_sampler`` builds a study's sampler by
name (TPE, random, the ``model`` sampler of ``model/``); ``failures.FailureMemory``
predicts, on specific evidence only, which proposals would fail before they cost a
restart. Nothing here starts a server or writes to the storage.
"""
