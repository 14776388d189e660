"""What the daemon tells about itself, importable from every layer: the Prometheus metrics it
counts (`metrics`: no Klein, no reactor) and the conditions that fail /health (`health`). The
port that serves the metrics is `apid.server.metrics`."""
