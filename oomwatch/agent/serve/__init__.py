"""Serving: the latest tick as Prometheus metrics, over HTTP(S) with the exporter-toolkit web config."""
