"""Kernel events as they happen: OOM reports from ``/dev/kmsg``, the journal or a kernel log file, and process
exits from the process events connector, each handed on to the incidents as it completes."""
