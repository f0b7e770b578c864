"""The 2018 reference as a Chalice project (``chalice local`` runs it from this directory).

This file only makes the module ``bench.reference_app.app`` for mypy, so it does not clash with
sagegate's own top-level ``app``.
"""
