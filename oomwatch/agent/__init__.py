"""The node agent (``oomwatch agent``, ``top``, ``run``, ``incidents``): its rooms, one job each.

* ``sample/``: what one tick sees (process table, smaps budget, node and cgroup collectors, GPU, discovery and roles);
* ``watch/``: kernel events as they happen (``/dev/kmsg``, the journal, a kernel log file, process exits);
* ``analyze/``: what a job's samples say about the cause (facts for the engine's causes), forecasts, strain;
* ``incidents/``: an incident written when the kernel (or a SIGKILL) kills a training process;
* ``history/``: the flight recorder (SQLite) and its read-only reader;
* ``serve/``: the Prometheus exporter and its HTTP(S) endpoint;
* ``run``, ``daemon``, ``config``, ``model``, ``top``: the commands' bodies, the loop, the settings, a tick's values.

The agent imports the engine, ``procfs``/``cgroupfs`` and ``render``; never the command line (``oomwatch.cli``).
"""
