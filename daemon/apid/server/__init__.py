"""The running daemon: composition of the parts, start and shutdown, logs, metrics, health, peers,
reloading and worker processes."""
