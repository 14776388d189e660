"""Mail: a message, the durable outbox written with the change that implies it, and the SMTP and
file senders."""
