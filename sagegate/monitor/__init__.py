"""``sagegate monitor``: the command-line side of the data quality monitor (argument parsing,
reading local folders and S3 prefixes); the analysis itself is :mod:`chalicelib.monitor`."""
