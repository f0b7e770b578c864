"""HTTP: the page's catalog of models, request correlation, static files (the request readers
are :mod:`chalicelib.reading`'s)."""
