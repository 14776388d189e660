"""HTTP: the site and its connections, reading requests, writing answers, compression, CORS,
proxies and the HTTP client; and what an HTTP operation is described with in OpenAPI terms
(`operations`, `problem_schemas`), so that every endpoint declares its own beside its handler."""
