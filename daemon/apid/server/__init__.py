"""The running daemon: composition of the parts, start (the migration in a child process) and
shutdown, logs, the metrics port, peers, reloading and worker processes."""
