"""KV cache memory: token pools and paged allocators (pluggable per platform)."""
