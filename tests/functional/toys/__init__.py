"""A pipeline kind and a job backend that sagegate does not ship, each one module: the proof
that a new kind or backend is its module and one registration line."""
