"""Training scripts for the models shipped with the diffusion runtime."""
