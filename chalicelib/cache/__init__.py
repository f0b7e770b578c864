"""The prediction cache: an endpoint's answer, kept, so a repeated input never reaches
SageMaker twice.

What is cached is the endpoint's whole answer (:class:`~chalicelib.calls.InvokeResult`:
body, content type, variant), never a rendered response: top-k, labels and a user's
``output_handler`` run on every request, hit or miss. The key is a SHA-256 digest of
everything that changes that answer:

* image models: the exact upload bytes (a hit decodes nothing, probes nothing: a cached
  answer can only exist for bytes that passed every check once, and the checks' limits are in
  the key), the model, endpoint, asked variant / target model / custom attributes, and the
  pipeline's settings (resize rule, encoding, passthrough, endpoint content type and accept);
* the other pipelines: what is sent to the endpoint (endpoint, content type, accept, variant,
  target model, custom attributes, body) and the content hash of the handler file, so an
  edited ``inference.py`` never serves answers of the old one.

Two tiers: an in-process LRU bounded in bytes (:class:`MemoryTier`, ``CACHE_MEMORY_BYTES``)
and an optional DynamoDB table shared by every container (:class:`TableTier`,
``CACHE_TABLE``); a table hit is promoted to memory, a miss in both calls the endpoint and
writes both. Concurrent misses of one key make one endpoint call (single flight): the others
wait for it, for a bounded time, then call the endpoint themselves; reading the cache and
joining a flight are two steps, so a request that becomes a flight's leader looks once more
(:meth:`PredictionCache.recheck`) before it calls. A cache failure never
fails a request: it is logged (one line), counted and the endpoint is called. Errors of the
endpoint are never cached.

The hash is chosen by measurement (``bench/README.md``, the cache part, has the figures):
SHA-256 beats BLAKE2b-128 on the x86_64 server CPUs Lambda runs on, which have SHA extensions,
and a 12 MP hit costs little more than hashing its bytes, so the hash is most of a hit's own
work. xxhash would be faster still but is one
more compiled dependency for the layer; the key's format is versioned by a prefix
(:data:`KEY_VERSION`).
"""
