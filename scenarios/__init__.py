"""Real reproductions of host-memory failures in ML training (torch on CPU, cgroup v1 limits).

``python -m scenarios list`` shows them; ``python -m scenarios run NAME [--fixed]`` runs one
inside a fresh memory cgroup and captures the console output, the kernel's OOM report for
that cgroup only, and per-process memory (see ``scenarios/README.md``).
"""
