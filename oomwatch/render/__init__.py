"""Every output made for a person or a machine: a diagnosis as text, Markdown or JSON, laid out for a terminal;
``top``; an incident as text or one HTML page; history tables; the ``run`` report.
Render takes values (the engine's model, the agent's tick values, incident documents) and returns text; it reads
no files and imports no agent room that does I/O."""
