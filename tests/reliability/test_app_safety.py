"""The studio binds only to loopback by default, rejects path traversal in run/export fields, and
user reward code cannot read files outside what the reward sandbox allows (rewards/sandbox.py:
a Python audit-hook guard, not a security boundary; see docs/reliability.md)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

import rewards
from apps import runs
from local_grpo.errors import UserError

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def listening_addresses(port: int) -> list[str]:
    """Local addresses of sockets in LISTEN state on `port` (from /proc/net/tcp and tcp6)."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            address, port_hex = fields[1].rsplit(":", 1)
            if int(port_hex, 16) == port and fields[3] == "0A":  # 0A = LISTEN
                if len(address) == 8:
                    found.append(socket.inet_ntop(socket.AF_INET, bytes.fromhex(address)[::-1]))
                else:
                    raw = b"".join(bytes.fromhex(address[i:i + 8])[::-1] for i in range(0, 32, 8))
                    found.append(socket.inet_ntop(socket.AF_INET6, raw))
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_app_binds_only_to_loopback_by_default(tmp_path):
    if not os.path.exists("/proc/net/tcp"):
        pytest.skip("needs /proc/net/tcp (Linux)")
    port = free_port()
    env = {**os.environ, "PYTHONPATH": REPO, "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1"}
    app = subprocess.Popen([sys.executable, "-m", "local_grpo.cli", "app", "--port", str(port), "--runs", str(tmp_path)],
                           cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 180
        while not listening_addresses(port):
            assert app.poll() is None, app.stderr.read()[-3000:]
            assert time.time() < deadline, "the app did not start listening"
            time.sleep(0.25)
        time.sleep(0.5)
        addresses = listening_addresses(port)
        assert addresses and set(addresses) <= {"127.0.0.1", "::1"}, addresses
    finally:
        app.terminate()
        try:
            app.wait(timeout=20)
        except subprocess.TimeoutExpired:
            app.kill()
            app.wait()


@pytest.mark.parametrize("field", ["run", "export"])
@pytest.mark.parametrize("path", ["../outside", "/etc", "a/../../x", "~/.ssh", "link-out"])
def test_run_and_export_fields_reject_paths_outside_the_runs_folder(tmp_path, field, path):
    root = tmp_path / "runs"
    root.mkdir()
    (root / "link-out").symlink_to("/tmp")
    if path == "~/.ssh":  # a literal '~' stays inside the runs folder (it is not expanded): allowed, harmless
        assert runs.resolve_under(str(root), path, field).startswith(os.path.realpath(root) + os.sep)
        return
    with pytest.raises(UserError, match=field):
        runs.resolve_under(str(root), path, field)


SNOOPING = '''
import os

def read_passwd(completions, **kwargs):
    open("/etc/passwd").read()
    return [1.0] * len(completions)

def list_ssh(completions, **kwargs):
    os.listdir(os.path.expanduser("~/.ssh"))
    return [1.0] * len(completions)

def read_repo(completions, **kwargs):
    open(REPO_FILE).read()
    return [1.0] * len(completions)

def run_shell(completions, **kwargs):
    import subprocess
    subprocess.run(["cat", "/etc/passwd"])
    return [1.0] * len(completions)

def write_outside(completions, **kwargs):
    open(OUTSIDE, "w").write("x")
    return [1.0] * len(completions)

def allowed(completions, **kwargs):
    import json, math, re, tempfile
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "vocab.txt")
    words = open(here).read().split()
    with open("scratch.txt", "w") as fh:  # the working directory is the child's private temp folder
        fh.write("ok")
    with tempfile.NamedTemporaryFile("w") as fh:
        fh.write("ok")
    return [float(len(words))] * len(completions)
'''


@pytest.mark.parametrize("function, blocked", [
    ("read_passwd", "reading /etc/passwd"),
    ("list_ssh", "/.ssh"),
    ("read_repo", "pyproject.toml"),
    ("run_shell", "starting programs"),
    ("write_outside", "writing"),
])
def test_user_reward_cannot_reach_files_outside_the_sandbox(tmp_path, function, blocked):
    outside = tmp_path / "outside" / "pwned.txt"
    outside.parent.mkdir()
    folder = tmp_path / "rewards"
    folder.mkdir()
    source = SNOOPING.replace("REPO_FILE", repr(os.path.join(REPO, "pyproject.toml"))).replace("OUTSIDE", repr(str(outside)))
    (folder / "snoop.py").write_text(source)
    reward = rewards.get(f"{folder / 'snoop.py'}:{function}")
    assert reward(["a", "b"]) == [None, None]
    events = reward.drain_events()
    assert events[0]["kind"] == "exception" and "reward sandbox" in events[0]["message"], events
    assert blocked in events[0]["message"]
    assert not outside.exists()


def test_user_reward_can_read_its_own_folder_and_write_its_temp_folder(tmp_path):
    (tmp_path / "snoop.py").write_text(SNOOPING)
    (tmp_path / "vocab.txt").write_text("one two three")
    reward = rewards.get(f"{tmp_path / 'snoop.py'}:allowed")
    assert reward(["a"]) == [3.0], reward.drain_events()
    assert not (tmp_path / "scratch.txt").exists()  # scratch files land in the child's temp folder
