"""Inference: the endpoint client with its retries, the pipelines, users' handler files."""
