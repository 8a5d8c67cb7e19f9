"""Model layers: tensor-parallel linear and embedding, norms, rotary, attention, sampling."""
