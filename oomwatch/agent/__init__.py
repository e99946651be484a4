"""The node agent: discovery of training processes and their roles (more to come: sampler, exporter)."""
