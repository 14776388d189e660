"""The `apid` command: one module per command group, the reactor installed before the daemon is
imported."""
