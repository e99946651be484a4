"""Serving: the latest tick as Prometheus metrics, over HTTP(S) with the exporter-toolkit web config.

* ``exporter``: the Prometheus collector (``AgentCollector``) and the render cache; ``series``: which
  processes get series of their own and how the others fold into groups;
* ``http``: the server (TLS, endpoints); ``webconfig``: the web config file and its checks;
  ``basicauth``: the bcrypt check.

Imports the agent's values (``agent.tick``, ``agent.incidents`` for its counts), never the command line.
"""
