"""OpenAI's API for the ``llm`` models, framework-free: a request read and checked
(:mod:`.requests`), translated to its container's schema and back (:mod:`.schemas`), streamed
as OpenAI's chunks (:mod:`.streams`), served (:mod:`.completions`); its errors in OpenAI's shape
(:mod:`.errors`). The routes' side is :mod:`chalicelib.http.completions`."""
