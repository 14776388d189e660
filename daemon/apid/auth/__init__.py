"""Authentication: passwords, access tokens and the public endpoints that issue them."""
