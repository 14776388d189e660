"""Webhooks: events recorded after data changes, and their signed, durable delivery."""
