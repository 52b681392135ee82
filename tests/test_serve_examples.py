"""The examples of docs/serve.md, run as a user runs them: ``rehydrate serve`` on a SQLite store,
``rehydrate worker`` serving ``examples/serve/worker.py``'s handler, and the hello world of each
language (Python with redis-py, a shell with redis-cli, Node.js with the redis npm package)
against them; each one's job reaches the Python handler.

The Node example's packages are installed by ``npm ci`` from its lockfile into a temporary
directory of this test run (nothing is left in the repository); without node and npm, or when
the install fails (no registry), that test is skipped with one line.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "serve"
EXPECTED = ["PUSH OK", "LOOK Dehydrate this", "TTN due within 300 ms", "GIDPUSH an id"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Served:
    def __init__(self, port: int, worker_log: Path) -> None:
        self.port = port
        self.worker_log = worker_log

    def env(self) -> dict[str, str]:
        return {**os.environ, "REHYDRATE_SERVE_PORT": str(self.port), "PYTHONPATH": str(ROOT)}

    def wait_for_email(self, sender: str) -> None:
        """The worker's handler printed the email ``sender``'s example pushed."""
        line = f"email to ada@example.com from {sender}"
        deadline = time.monotonic() + 30
        while line not in self.worker_log.read_text():
            assert time.monotonic() < deadline, (
                f"the handler never got {sender}'s job: {self.worker_log.read_text()}"
            )
            time.sleep(0.1)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("serve-examples")
    store = f"sqlite:///{tmp / 'jobs.db'}"
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    rehydrate = [sys.executable, "-m", "rehydrate", "-qq"]
    server = subprocess.Popen([*rehydrate, "serve", "--store", store, "--port", str(port)], env=env)
    worker_log = tmp / "worker.out"
    worker = None
    try:
        deadline = time.monotonic() + 30
        while True:  # serve creates the database; the worker starts once it answers
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert server.poll() is None, "rehydrate serve exited"
                assert time.monotonic() < deadline, "rehydrate serve did not start"
                time.sleep(0.1)
        with worker_log.open("w") as log:
            worker = subprocess.Popen(
                [*rehydrate, "worker", "worker:scheduler", "--store", store],
                cwd=EXAMPLES,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        yield Served(port, worker_log)
    finally:
        for process in (worker, server):
            if process is not None:
                process.terminate()
                try:
                    process.wait(20)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


def _check(output: str, polls: list[str]) -> None:
    lines = output.splitlines()
    assert [line for line in lines if not line.startswith("POLL")] == EXPECTED, output
    assert [line for line in lines if line.startswith("POLL")] == polls, output


def test_python_example(served: Served) -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "hello.py")],
        env=served.env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    _check(done.stdout, ["POLL []", 'POLL ["Dehydrate this"]'])
    served.wait_for_email("python")


def test_shell_example(served: Served) -> None:
    if shutil.which("redis-cli") is None:
        pytest.skip("redis-cli is not installed")
    done = subprocess.run(
        ["sh", str(EXAMPLES / "hello.sh")], env=served.env(), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    _check(done.stdout, ["POLL (empty array)", "POLL Dehydrate this"])
    served.wait_for_email("shell")


@pytest.fixture(scope="module")
def node_example(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """examples/serve/node, its packages installed (``npm ci``) in a directory of this run."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("node and npm are not installed")
    where = tmp_path_factory.mktemp("node-example")
    for name in ("package.json", "package-lock.json", "hello.mjs"):
        shutil.copy(EXAMPLES / "node" / name, where / name)
    cache = tmp_path_factory.mktemp("npm-cache")
    try:
        done = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--cache", str(cache)],
            cwd=where,
            capture_output=True,
            text=True,
            timeout=300,
        )
    except subprocess.TimeoutExpired:
        pytest.skip("npm ci of examples/serve/node took over 5 minutes (no registry?)")
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        pytest.skip(f"npm ci of examples/serve/node failed: {last}")
    return where


def test_node_example(served: Served, node_example: Path) -> None:
    done = subprocess.run(
        ["node", "hello.mjs"], cwd=node_example, env=served.env(), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    _check(done.stdout, ["POLL []", 'POLL ["Dehydrate this"]'])
    served.wait_for_email("node")


def test_the_docs_show_the_examples_as_they_are() -> None:
    """Each example's code block in docs/serve.md is the example file's text (its opening
    comments and docstring aside): what the page shows is what the tests above run."""
    import re

    page = (ROOT / "docs" / "serve.md").read_text()
    blocks = re.findall(r"```(\w+)\n(.*?)```", page, flags=re.S)
    files = {
        "python": [EXAMPLES / "worker.py", EXAMPLES / "hello.py"],
        "sh": [EXAMPLES / "hello.sh"],
        "js": [EXAMPLES / "node" / "hello.mjs"],
    }
    for language, paths in files.items():
        shown = [body for lang, body in blocks if lang == language]
        for path in paths:
            text = path.read_text()
            assert any(len(body) > 200 and body in text for body in shown), (
                f"docs/serve.md does not show {path}"
            )
