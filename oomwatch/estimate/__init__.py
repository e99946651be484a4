"""``oomwatch estimate``: how much host memory a job will need at another scale, and with each fix.

* ``model``: a recorded run's samples as a model per role (private set, its step up while loading, its growth)
  and what the node holds once (shared pages, page cache);
* ``project``: the model at R ranks, W workers, N nodes (and the full run's length): the peak per node with an
  interval, the share by role, fits or not under a limit;
* ``fixes``: the model as each fixable mechanism's fix would make it;
* ``inputs``: a run report's or the agent's history's samples as the model's input.

Pure: values in, values out (the command reads the files; ``oomwatch.render.estimate`` writes the answer).
Imports the engine only.
"""
