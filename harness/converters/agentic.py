"""endpoints' agentic trajectory JSONL (mlcommons/endpoints ea33275, examples/10_Agentic_Inference:
one row per message), checked as its loader checks it and written as the trajectory file perfdag
replays: the `_type: dataset_metadata` rows first, as they are, then each conversation's rows in turn
order with every field kept (the per-row request fields `model`, `max_new_tokens`,
`max_completion_tokens`, `max_tokens`, `stream`, `tools` included). A row the loader refuses is refused
naming its line (harness/sessions/trajectories.py)."""
from __future__ import annotations

from pathlib import Path

from harness.converters import write_jsonl
from harness.sessions.trajectories import PROPAGATED, read_trajectory_file

DESCRIPTION = "endpoints' agentic trajectory JSONL -> a checked trajectory file (metadata rows, per-row fields kept)"


def convert(src: Path, out: Path) -> dict:
    f = read_trajectory_file(src)
    n = write_jsonl(out, [*f.metadata, *f.rows])
    fields = sorted({k for r in f.rows for k in PROPAGATED if r.get(k) is not None and k != "tools"})
    return {"rows": n, "conversations": len(f.trajectories), "client_turns": sum(len(t.turns) for t in f.trajectories),
            "metadata_rows": len(f.metadata), "request_fields": fields}
