"""The zero-cost echo servers (harness/serving/testing/) as the tests start them: a real process on a free
port, ready when it answers /health, stopped when the test is done with it."""
from __future__ import annotations

import contextlib
import subprocess
import sys
import time

from conftest import REPO

from harness.serving.openai.client import probe
from harness.serving.ports import free_port

OPENAI = "harness.serving.testing.echo_openai"
TRANSCRIPTION = "harness.serving.testing.echo_transcription"


def start_echo(module: str, *flags: str) -> tuple[str, subprocess.Popen]:
    """`python -m <module> --port P <flags>`, once it answers: ('127.0.0.1:P', its process)."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", module, "--port", str(port), *flags], cwd=REPO)
    url = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while not probe(url):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait(10)
            raise AssertionError(f"{module} {' '.join(flags)} did not answer /health (exit {proc.returncode})")
        time.sleep(0.1)
    return url, proc


@contextlib.contextmanager
def echo_server(module: str, *flags: str):
    """start_echo's server for the block: yields its 'host:port'."""
    url, proc = start_echo(module, *flags)
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(10)
