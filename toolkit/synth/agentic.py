"""Labelled-synthetic agentic sessions: shared system prompt, growing context, tool outputs.

Each session is one agent run: turn 0 sends ``system prompt + task``; every later turn
sends the previous prompt, the previous answer and a tool output. All turns of a session
are one growing token stream, so page ``j`` (``page_tokens`` tokens) has the same
chained hash in every turn that contains it whole; pages inside the shared system prompt
share ids across sessions; a partial tail page is keyed by its length too (it differs
from the full page that later turns hold). Timestamps are nominal: sessions start as a
Poisson process and turn ``t+1`` is sent ``think time`` after turn ``t`` *as if service
were instant*; a closed-loop replay uses those gaps as think times.

Presets (see :data:`PRESETS`) are calibrated to public figures:
``toolagent`` to Mooncake FAST'25 Table 2's tool&agent column (average input 8,596,
output 182, cache ratio 59%); ``coding`` to coding-agent traffic (ISL/OSL >> 100, GitHub
Copilot coding agent 2026: 540.95B of 631.4B prompt tokens cached, 86%), with contexts
that grow to ~100-200K tokens. Everything here is synthetic and labelled so.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from toolkit.config import config_json
from toolkit.ingest.fields import requests_table

if TYPE_CHECKING:
    from toolkit.store import Store

_SESSION_BASE = 1 << 40  # hash namespace of session pages (system pages are 0..)
_PARTIAL_BASE = 1 << 61  # partial tail pages


@dataclass(frozen=True)
class AgenticConfig:
    """Parameters of the generator (token counts are means of lognormal draws).

    Attributes:
        sessions: number of agent sessions.
        turns_min, turns_max: turns per session, uniform integer.
        system_prompt_tokens: shared by every session (tools, instructions).
        task_tokens: the first user message.
        tool_output_tokens: appended per later turn (file reads, test logs).
        output_tokens: model answer per turn.
        sigma: lognormal shape of the three token sizes.
        max_context_tokens: a session stops before its prompt would exceed this.
        think_time_s: mean (exponential) gap between a turn's send and the next.
        session_rate_per_s: Poisson rate of session starts (nominal timeline).
        page_tokens: hashing granularity (HiCache best practice: 64).
        seed: RNG seed; same config, same table.
    """

    sessions: int = 200
    turns_min: int = 10
    turns_max: int = 40
    system_prompt_tokens: int = 12_000
    task_tokens: int = 1_500
    tool_output_tokens: int = 3_000
    output_tokens: int = 250
    sigma: float = 0.6
    max_context_tokens: int = 200_000
    think_time_s: float = 2.0
    session_rate_per_s: float = 0.2
    page_tokens: int = 64
    seed: int = 0


#: Calibrated presets (see the module docstring and tests/test_agentic.py).
PRESETS: dict[str, AgenticConfig] = {
    "coding": AgenticConfig(),
    "toolagent": AgenticConfig(
        sessions=1000, turns_min=1, turns_max=3, system_prompt_tokens=3_200,
        task_tokens=3_000, tool_output_tokens=3_600, output_tokens=176, sigma=0.8,
        max_context_tokens=64_000, think_time_s=3.0, session_rate_per_s=2.0,
    ),
}


def _lognormal(rng: np.random.Generator, mean: float, sigma: float, size: int) -> np.ndarray:
    mu = np.log(max(mean, 1.0)) - sigma * sigma / 2  # so the mean is ``mean``
    return np.maximum(1, np.rint(rng.lognormal(mu, sigma, size))).astype(np.int64)


def _page_ids(session: int, length: int, cfg: AgenticConfig) -> list[int]:
    p = cfg.page_tokens
    full, tail = divmod(length, p)
    sys_pages = cfg.system_prompt_tokens // p  # whole pages inside the shared prompt
    j = np.arange(full, dtype=np.int64)
    ids = np.where(j < sys_pages, j, _SESSION_BASE + session * (1 << 20) + j)
    out = ids.tolist()
    if tail:
        out.append(_PARTIAL_BASE + (session * (1 << 20) + full) * p + tail)
    return out


def generate(cfg: AgenticConfig, trace: str = "agentic") -> pa.Table:
    """A ``requests`` table (with ``session_id``/``turn``) for ``cfg``, sorted by arrival."""
    if cfg.turns_min < 1 or cfg.turns_max < cfg.turns_min:
        raise ValueError("need 1 <= turns_min <= turns_max")
    rng = np.random.default_rng(cfg.seed)
    starts = np.cumsum(rng.exponential(1.0 / cfg.session_rate_per_s, cfg.sessions))
    starts -= starts[0]
    rows: list[tuple[float, int, int, list[int], int, int]] = []
    for s in range(cfg.sessions):
        turns = int(rng.integers(cfg.turns_min, cfg.turns_max + 1))
        task = _lognormal(rng, cfg.task_tokens, cfg.sigma, 1)[0]
        tools = _lognormal(rng, cfg.tool_output_tokens, cfg.sigma, turns)
        outs = _lognormal(rng, cfg.output_tokens, cfg.sigma, turns)
        thinks = rng.exponential(cfg.think_time_s, turns)
        length = cfg.system_prompt_tokens + int(task)
        t = float(starts[s])
        for turn in range(turns):
            if turn:
                length += int(outs[turn - 1] + tools[turn])
                t += float(thinks[turn - 1])
            if length > cfg.max_context_tokens:
                break
            rows.append((t, s, turn, _page_ids(s, length, cfg), length, int(outs[turn])))
    rows.sort(key=lambda r: (r[0], r[1], r[2]))
    return requests_table(
        trace,
        [r[0] for r in rows],
        [r[4] for r in rows],
        [r[5] for r in rows],
        cfg.page_tokens,
        [r[3] for r in rows],
        session_id=[r[1] for r in rows],
        turn=[r[2] for r in rows],
    )


def describe(cfg: AgenticConfig) -> dict[str, object]:
    """The config as a plain dict, with the label every synthetic trace carries."""
    return {"synthetic": True, "generator": "toolkit.synth.agentic", **asdict(cfg)}


def write_agentic(store: Store, cfg: AgenticConfig, name: str, *, replace: bool = False
                  ) -> pa.Table:
    """Generate ``cfg``'s timeline as trace ``name`` and store it in one write with its
    ``request_traces`` row, which labels it SYNTHETIC and records the config; returns the
    requests table. (``toolkit synth agentic`` and ``Workspace.synth_agentic``.)"""
    table = generate(cfg, name)
    meta = pa.table({"trace": [name], "format": ["synth-agentic"],
                     "source": [f"SYNTHETIC toolkit.synth.agentic {config_json(cfg)}"],
                     "synthetic": [True]})
    store.write_many({"requests": table, "request_traces": meta}, name, replace=replace)
    return table
