"""Serving recipes as explicit inputs: MTP drafts and acceptance, KV-cache dtype, batch caps and
the engine's software version, per row and per ``cost compare`` call.

Why inputs and not fitted terms: a per-engine term fitted to sparse rows becomes a sink for
whatever the model lacks (an engine's MTP acceptance fitted at 1.68 on one engine and 2.20 on
another made one accelerator look 5x cheaper than a sibling with the same HBM bandwidth). A
recipe value is stated, sourced or labelled as an assumption, and can be changed by the user.

Optional row columns (InferenceX rows carry none of them; defaults below):

* ``mtp_draft_tokens``: draft tokens verified per MTP step;
* ``mtp_accept``: tokens accepted per MTP step (1 .. 1 + drafts);
* ``kv_dtype``: fp8 or bf16 KV cache;
* ``max_running_requests``: the engine's cap on requests decoding per instance;
* ``engine_date``: the engine build's date (``YYYY-MM-DD``); else the row's ``date`` (the run
  date, a proxy for the image it pulled); else the reference date (age 0).
"""

from __future__ import annotations

import datetime as _dt
import re
from functools import cache

import numpy as np
import polars as pl

MTP_DRAFT_TOKENS = 1
"""Default draft tokens per MTP step: DeepSeek-V3 ships one MTP module (D = 1; DeepSeek-V3
Technical Report, arXiv:2412.19437, section 2.2)."""

MTP_ACCEPT = 1.85
"""Default tokens accepted per MTP step with one draft: DeepSeek-V3 Technical Report,
arXiv:2412.19437, section 5.4.3 ("the acceptance rate of the second token prediction ranges
between 85% and 90%"), lower end: 1 + 0.85."""

KV_DTYPE = "fp8"
"""Default KV-cache dtype (assumed: the FP8 KV caches of the InferenceX DeepSeek recipes)."""

KV_DTYPES = ("fp8", "bf16")

VERSION_RE = re.compile(r"(?:^|[:/_-])v?(\d+\.\d+(?:\.\d+)?(?:\.?(?:post|rc)\d+)*)")
"""An engine version inside an image reference: ``lmsysorg/sglang:v0.5.12-rocm700-mi35x``
-> ``0.5.12``; ``nvcr.io/.../tensorrt-llm/release:1.1.0rc2.post2`` -> ``1.1.0rc2.post2``."""


class RecipeError(ValueError):
    """A recipe value is out of range or an engine version is unknown."""


def parse_version(image: str | None) -> str | None:
    """The version in an image reference, or None when it carries none."""
    if not image:
        return None
    m = VERSION_RE.search(image.split("@")[0])
    return m.group(1) if m else None


def _days(date: str) -> float:
    return float(_dt.date.fromisoformat(date[:10]).toordinal())


def age_days(df: pl.DataFrame, reference_date: str) -> np.ndarray:
    """Days from each row's engine date back to ``reference_date``; negative for an engine
    newer than the reference (its fitted drift then applies forward, for at most a year)."""
    ref = _days(reference_date)
    dates = None
    for col in ("engine_date", "date"):
        if col in df.columns:
            s = df[col].cast(pl.String)
            dates = s if dates is None else dates.fill_null(s)
    if dates is None:
        return np.zeros(df.height)
    out = np.array([ref - _days(d) if d else 0.0 for d in dates.to_list()])
    return np.maximum(out, -365.0)


@cache
def _bundled_versions() -> dict[tuple[str, str], str]:
    """(engine, version) -> the earliest bundled run date that used it."""
    from toolkit.serving.points import bundled_points_path

    df = pl.read_csv(bundled_points_path(), columns=["framework", "image", "date"],
                     infer_schema_length=0)
    out: dict[tuple[str, str], str] = {}
    for eng, img, date in df.iter_rows():
        v = parse_version(img)
        if v and date:
            key = (eng, v)
            out[key] = min(out.get(key, date), date)
    return out


def version_date(engine: str, version: str) -> str:
    """The date an engine version stands for: a ``YYYY-MM-DD`` date as given, or the earliest
    bundled InferenceX run of that engine with that version.

    Raises:
        RecipeError: unknown version (the message lists the known ones).
    """
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", version):
        _dt.date.fromisoformat(version)
        return version
    v = parse_version(version) or version.lstrip("v")
    known = _bundled_versions()
    if (engine, v) in known:
        return known[(engine, v)]
    mine = sorted(k[1] for k in known if k[0] == engine)
    raise RecipeError(f"engine {engine!r} version {version!r} is unknown; give a date "
                      f"(YYYY-MM-DD) or one of: {', '.join(mine) or 'none bundled'}")


def mtp_inputs(df: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per-row (draft tokens, accepted tokens) of MTP rows; (0, 1) for rows without MTP.

    Raises:
        RecipeError: acceptance outside ``1 .. 1 + drafts`` (row named).
    """
    n = df.height
    mtp = (df["spec_method"] == "mtp").to_numpy()

    def col(name: str, default: float) -> np.ndarray:
        if name in df.columns:
            return df[name].cast(pl.Float64, strict=False).fill_null(default).to_numpy()
        return np.full(n, default)

    drafts = col("mtp_draft_tokens", MTP_DRAFT_TOKENS)
    accept = col("mtp_accept", MTP_ACCEPT if MTP_ACCEPT <= 1 + MTP_DRAFT_TOKENS else 1.0)
    bad = mtp & ~((drafts >= 1) & (accept >= 1.0) & (accept <= 1.0 + drafts))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise RecipeError(f"row {i + 1}: mtp_accept {accept[i]:g} must lie in 1 .. 1 + "
                          f"mtp_draft_tokens ({drafts[i]:g})")
    return np.where(mtp, drafts, 0.0), np.where(mtp, accept, 1.0)
