"""HTTP: request bodies and options, content negotiation, static files and the page's catalog."""
