"""API calls: the URL grammar, dispatch, the one pipeline, batch, chain, caching, preconditions,
links, deprecation, rate limits."""
