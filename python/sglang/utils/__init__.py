"""Helpers both runtimes share (they import no runtime)."""
