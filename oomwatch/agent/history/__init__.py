"""The flight recorder: every tick's samples in SQLite, kept across the kill; a read-only reader for
``oomwatch history`` and ``diagnose --history``."""
