"""Jobs: inputs too large or models too slow for the synchronous route.

The job record and its forward-only state machine (:mod:`.records`), the stores that keep
records (:mod:`.store`: in memory, or one DynamoDB table with conditional writes) and the
presigned uploads clients send large inputs through (:mod:`.uploads`). Under faults: the one
mapping of S3's and DynamoDB's failures to 503 ``JobsUnavailable`` (:mod:`.awsfaults`), a
runner's life derived from its function's timeout (:mod:`.lifetime`), and a real-time job's
endpoint calls retried until its deadline, never twice for one answer (:mod:`.invoking`).

This room sits above inference and capture and below http and the composition root; it loads
no boto3 or botocore at import time (clients are passed in or built on first use).
"""
