"""The node agent (``oomwatch agent``, ``top``, ``run``, ``incidents``): its rooms, one job each.

* ``sample/``: what one tick sees (process table, smaps budget, node and cgroup memory, GPU, discovery, roles);
* ``watch/``: kernel events as they happen (``/dev/kmsg``, the journal, a kernel log file, process exits);
* ``analyze/``: what a job's samples say about the cause (facts for the engine's causes), forecasts, strain;
* ``incidents/``: an incident written when the kernel (or a SIGKILL, or a counter) kills a training process;
* ``history/``: the flight recorder (SQLite): schema, writer, bounds and the read-only reader;
* ``serve/``: the Prometheus exporter and its HTTP(S) endpoint;
* ``daemon``, ``config``: the agent's loop and its settings; ``run``, ``recorder``: ``oomwatch run``'s body and
  what it recorded; ``top``: ``oomwatch top``'s rows; ``tick``: the values one tick saw; ``atomic``: state files.

The agent imports the engine, ``procfs``/``cgroupfs`` and ``render``; never the command line (``oomwatch.cli``).
Every output for people is made in ``oomwatch.render``.
"""
