"""The streaming function: OpenAI's completion routes answered through Lambda's response
streaming, by our own Runtime API loop (see docs/DEPLOY.md, "Streaming on AWS")."""
