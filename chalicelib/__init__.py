"""sagegate: a serverless front-end for Amazon SageMaker real-time endpoints."""
