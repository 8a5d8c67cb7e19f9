"""Machinery shared by the SRT and diffusion plugin systems.

Each runtime builds its own registry and loader on top of these pieces, so hooks
registered with one runtime's API never run in the other. Nothing here imports
torch or any runtime module.
"""
