"""specplug tune: measure the recommended techniques against a control at the user's load, decide with a
margin beyond the noise, and write the decision (specplug.yaml, the lock, a calibration) with its evidence.

One job per module:

- :mod:`~specplug.tune.settings`: what the user asked for (levels, repeats, budget) and its fingerprint;
- :mod:`~specplug.tune.trials`: the trial plan (control, candidates x k, order, time, budget);
- :mod:`~specplug.tune.prompts`: the prompts replayed (a traffic file or a built-in workload);
- :mod:`~specplug.tune.state`: the resumable state file in the output folder;
- :mod:`~specplug.tune.runner`: launching one trial, loading it, reading its metrics and outputs;
- :mod:`~specplug.tune.session`: preparing and running the trials (reporting through a callback), Ctrl-C, resume;
- :mod:`~specplug.tune.acceptance`: acceptance per position, pooled and carried to shorter k;
- :mod:`~specplug.tune.decide`: speedups with their spread, the margin, the per-batch schedule;
- :mod:`~specplug.tune.writeback`: editing specplug.yaml in place (the rest of the file untouched);
- :mod:`~specplug.tune.evidence`: tune.json, tune.csv and tune.png;
- :mod:`~specplug.tune.feedback`: the measured acceptance as a calibration, against the prediction;
- :mod:`~specplug.tune.lockref`: the tune a lock was made from, and when that evidence is stale.

Nothing here prints a table or draws a bar: the CLI does (``specplug.commands._tune_tables``, ``_progress``).
"""
