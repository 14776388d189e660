"""HTTP: the site and its connections, reading requests, writing answers, compression, CORS,
proxies and the HTTP client."""
