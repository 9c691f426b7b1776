"""Replay drivers: turn stored traces into key streams, call policy kernels, store results."""
