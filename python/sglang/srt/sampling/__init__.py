"""Sampling parameters and the batched sampler."""
