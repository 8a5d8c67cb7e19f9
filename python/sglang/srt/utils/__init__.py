"""Process and networking helpers."""
