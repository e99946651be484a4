"""Live analyzers: what a job's samples (or its history) say about the cause, as facts for the engine's causes;
the time left before a limit; warnings of strain before any kill. Pure: values in, facts out."""
