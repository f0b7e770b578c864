"""The data quality monitor end to end: the CLI on capture folders and S3 (moto),
the report in Chromium."""
