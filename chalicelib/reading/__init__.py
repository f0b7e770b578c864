"""Reading requests: a body's shape, its options, content negotiation. The routes and the jobs
both read through here (a job's input is read as the model route reads a request)."""
