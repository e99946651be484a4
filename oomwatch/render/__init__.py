"""Every output made for a person or a machine, one module each: a diagnosis as text, Markdown or JSON
(``diagnosis``, laid out for a terminal by ``layout``); ``top``; ``run``'s own output and its ``--report``
(``run``, ``run_report``); an incident as text (``incident_text``, also the incidents list) or one HTML page
(``incident_html``, its SVG charts ``incident_chart``, the values both read ``incident_values``); the history
tables (``history``).

Render takes values and returns text; it writes and reads no files (the command that asked for a file writes
it). It may import the engine, ``oomwatch.textsafe``, ``oomwatch.redact`` and the agent's pure value modules
(``agent.tick``, ``agent.recorder``, ``agent.top``); no agent room that does I/O (sample, watch, incidents,
history, serve) and no command line (tests/test_import_directions.py holds it)."""
