"""Mail: a message (`message`), the durable outbox written with the change that implies it
(`outbox`), and the file and SMTP senders (`senders`, `smtp`)."""
