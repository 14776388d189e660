"""Authentication and accounts: passwords, access tokens, API keys, sessions, the accounts (their
rows, the service, a change of address, the abuse limits) and the public endpoints that issue
tokens and accounts."""
