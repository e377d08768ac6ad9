"""Runs: identity (hash), the on-disk store and executing one run end to end."""
