"""Every Parquet reader and writer of the store: a one-row encoder (``row``), a flat
table encoder (``table``), the top-k page decoder replays read with (``topk_pages``), and
the codec, row-group and streaming choices for all of them (``sink``)."""
