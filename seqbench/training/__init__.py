"""Training: the one shared loop, checkpoints, and the context and observer runs train with."""
