"""What the storage holds and what it says: the keys, the verdict, and their displays.

``attrs`` names every key written into Optuna's storage; ``kind`` says what kind of trial
a stored trial is and ``labels`` how a configuration is named, each in one place.
``verdict`` pools replicates and decides the best configuration and its speedup (every
display reads it); ``levels``, ``hosts`` and ``headline`` give it per concurrency level,
per group and in one line; ``status``, ``export``, ``report``, ``figures``, ``why``,
``table`` and ``dash`` show it. Nothing here imports run/: results are read from the
storage, whoever wrote them.
"""
