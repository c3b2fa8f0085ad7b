"""A long loop's progress off a terminal (harness/model/progress.py): a line at a steady interval,
so a CI job's or a Slurm job's log shows how far training got (issue 48: at least every 30 s)."""
from __future__ import annotations

import re

from conftest import run_luigi

from harness.model.progress import EVERY_S, Steps


def test_off_a_terminal_a_line_comes_at_each_interval_and_at_the_end():
    now = [0.0]
    lines: list[str] = []
    with Steps("training tiny llama", 100, lines.append, live=False, clock=lambda: now[0]) as steps:
        for _ in range(100):
            now[0] += 0.5  # 0.5 s a step: 50 s in all
            steps.advance(1.2345)
    assert EVERY_S <= 30 and len(lines) == 50 / EVERY_S
    assert lines[0] == f"training tiny llama: step {int(EVERY_S / 0.5)}/100, loss 1.234, {EVERY_S:.0f} s, about 40 s left"
    assert lines[-1] == "training tiny llama: step 100/100, loss 1.234, 50 s"


def test_a_fast_loop_says_only_where_it_ended():
    lines: list[str] = []
    with Steps("training tiny whisper", 3, lines.append, live=False, clock=lambda: 0.0) as steps:
        for _ in range(3):
            steps.advance(0.5)
    assert lines == ["training tiny whisper: step 3/3, loss 0.500, 0 s"]


def test_a_prepare_model_run_logs_its_training_into_a_non_tty_stderr(tmp_path):
    """PrepareModel's training in a luigi process whose stderr is a pipe, as under CI or Slurm: its step
    lines reach the log (the rich bar, drawn only on a terminal, printed nothing there)."""
    proc = run_luigi("PrepareModel", "--overrides", "model.tiny.train_steps=5", artifacts=tmp_path / "artifacts")
    steps = [x for x in proc.stderr.splitlines() if "training tiny llama: step " in x]
    assert steps and re.search(r"training tiny llama: step 5/5, loss \d+\.\d{3}, \d+ s$", steps[-1]), proc.stderr[-2000:]
