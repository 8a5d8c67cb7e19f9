"""Entry points: the offline ``Engine`` and (with the server) the HTTP API."""
