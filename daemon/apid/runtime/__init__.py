"""What the process runs on: the Twisted reactor, chosen by the `reactor` setting, installed once
before anything imports it, and typed as the interfaces apid uses (`reactors`); and where a
plugin's coroutine runs under it, on Twisted's driver or as an asyncio task (`coroutines`);
whether TLS and public-key cryptography load into the process at all (`tls`).
Below every package that is handed a reactor or runs a plugin's coroutine."""
