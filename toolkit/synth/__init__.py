"""Labelled-synthetic workload generators (every trace they emit says it is synthetic)."""
