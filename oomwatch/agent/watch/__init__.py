"""Kernel events as they happen: OOM reports from ``/dev/kmsg``, the journal or a kernel log file, and process
exits from the process events connector, each handed on to the incidents as it completes.

``base`` is what the three followers of the kernel's log share (thread, restart, position file, settle
time); ``spans`` says where a report starts and ends; ``killid`` what makes a kill the same kill wherever it
is read (the positions and the incidents both key on it). Imports ``procfs`` and ``agent.atomic``;
never the command line.
"""
