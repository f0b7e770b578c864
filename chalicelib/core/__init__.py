"""Foundations: errors, media types, settings, access, lifecycle, logs and metrics, retries.

Nothing here imports another room of chalicelib, nor numpy, OpenCV or botocore.
"""
