"""The ``sglang`` command line."""
