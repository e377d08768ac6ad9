"""Evaluation: protocols (candidate sets, history handling), ranks, metrics. Exists once."""
