"""Labelled-synthetic generators. Everything they write is marked synthetic in the store."""
