"""Incidents: when the kernel kills a training process (or a SIGKILL or a counter says one died), write one
JSON file with the diagnosis, the history before the kill, the job's output and code; list and read them back.

* ``writer``: ``Incidents``, one incident per kill (the entry points, the diagnosis, the document);
* ``gather``: what is kept while jobs run for the next kill (samples, loners, located output and code, ticks);
* ``ledger``: each kill taken on once, counted, its files written or queued and retried;
* ``listing``: the incidents on disk read back; ``counter``: kills seen only by the OOM-kill counters;
* ``sigkills``: SIGKILLs with no OOM report; ``joboutput``: the job's stdout/stderr files.

May import the engine, ``procfs`` (/dev/kmsg too), the agent's ``tick``, ``atomic``, ``analyze``, ``sample``
(the job's code) and ``watch`` (process exits, kill ids), and ``render`` (the incident's text); the history store is
handed in (imported for its type only); never ``serve`` or the command line.
"""
