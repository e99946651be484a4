"""Incidents: when the kernel kills a training process (or a SIGKILL or a counter says one died), write one
JSON file with the diagnosis, the history before the kill, the job's output and code; list and read them back."""
