"""Sampling: what one agent tick sees of the node, its cgroups and its training processes, and which job and
role each process has. Reads kernel files through ``oomwatch.procfs``/``oomwatch.cgroupfs``; imports no other
room of the agent but ``agent.tick``."""
