"""Hosting plugins: discovery through entry points, their migrations, their start-up and shutdown
hooks, and `apid new-plugin`."""
