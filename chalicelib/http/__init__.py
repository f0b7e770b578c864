"""HTTP: a room per route family over the exchange (the request, its ids, its answer); the
request readers are :mod:`chalicelib.reading`'s."""
