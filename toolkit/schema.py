"""Arrow schemas of every table a store holds, in one place.

Readers build tables against these schemas and the store refuses anything else, so a
column's type and meaning are defined exactly once.
"""

from __future__ import annotations

import pyarrow as pa

#: One row per request of a request timeline (Mooncake, Azure, synthetic sessions).
REQUESTS = pa.schema(
    [
        pa.field("trace", pa.string(), nullable=False),
        pa.field("request_id", pa.int64(), nullable=False),  # 0-based position in the file
        pa.field("arrival_s", pa.float64(), nullable=False),  # seconds since the trace start
        pa.field("input_tokens", pa.int64(), nullable=False),
        pa.field("output_tokens", pa.int64(), nullable=False),
        pa.field("block_tokens", pa.int32(), nullable=True),  # tokens per hashed block; null: no hashes
        pa.field("block_hashes", pa.list_(pa.int64()), nullable=False),  # chained prefix-block ids
        pa.field("session_id", pa.int64(), nullable=True),
        pa.field("turn", pa.int32(), nullable=True),
    ]
)

#: One row per replay run: its frozen config (flattened) plus the run summary.
REPLAY_RUNS = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),  # fingerprint of the config
        pa.field("kind", pa.string(), nullable=False),  # "prefix", "selections", ...
        pa.field("trace", pa.string(), nullable=False),
        pa.field("policy", pa.string(), nullable=False),
        pa.field("capacity_blocks", pa.int64(), nullable=True),  # null: unbounded
        pa.field("config_json", pa.string(), nullable=False),
        pa.field("requests", pa.int64(), nullable=False),
        pa.field("prompt_tokens", pa.int64(), nullable=False),
        pa.field("block_lookups", pa.int64(), nullable=False),
        pa.field("block_hits", pa.int64(), nullable=False),
        pa.field("block_hit_ratio", pa.float64(), nullable=False),
        pa.field("hit_tokens", pa.int64(), nullable=False),
        pa.field("token_hit_ratio", pa.float64(), nullable=False),
        pa.field("prefix_hit_blocks", pa.int64(), nullable=False),
        pa.field("prefix_hit_tokens", pa.int64(), nullable=False),
        pa.field("prefix_token_hit_ratio", pa.float64(), nullable=False),
        pa.field("evictions", pa.int64(), nullable=False),
        pa.field("elapsed_s", pa.float64(), nullable=False),  # wall time of the kernel + summary
        pa.field("toolkit_version", pa.string(), nullable=False),
    ]
)

#: Tables the store knows, by name. A table is a directory of Parquet files, one per key.
TABLES: dict[str, pa.Schema] = {
    "requests": REQUESTS,
    "replay_runs": REPLAY_RUNS,
}


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Return ``table`` with exactly ``schema``'s columns, order and types.

    Raises:
        ValueError: a column is missing or cannot be cast safely.
    """
    missing = [f.name for f in schema if f.name not in table.column_names]
    if missing:
        raise ValueError(f"table lacks column(s) {missing}; expected {schema.names}")
    return table.select(schema.names).cast(schema, safe=True)
