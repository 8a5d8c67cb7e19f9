"""OpenAI-compatible API: request/response schemas and the route handlers."""
