"""Training: the one shared loop, checkpoints and devices."""
