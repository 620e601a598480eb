"""JupyterLab started as a learner starts it (`make lab`), headless, for the set-up and
browser tests."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).parents[1]
TOKEN = "tfcourse-test-token"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def running_lab(tmp_path, timeout=60):
    """`make lab` (the course's configuration) on a free port of 127.0.0.1, with its runtime,
    configuration, user settings and workspaces in tmp_path. Yields the base URL; the server
    and its kernels are stopped afterwards. Outside the make venv: `python -m jupyterlab`."""
    port = free_port()
    args = f"--no-browser --ip=127.0.0.1 --port={port} --IdentityProvider.token={TOKEN}"
    in_make_venv = Path(sys.prefix).resolve() == (ROOT / ".venv").resolve()
    command = (
        ["make", "-s", "lab", f"ARGS={args}"]
        if in_make_venv
        else [sys.executable, "-m", "jupyterlab", "--allow-root", *args.split()]
    )
    env = {**os.environ, **{name: str(tmp_path / name.lower()) for name in (
        "JUPYTER_RUNTIME_DIR", "JUPYTER_CONFIG_DIR", "JUPYTERLAB_SETTINGS_DIR",
        "JUPYTERLAB_WORKSPACES_DIR")}}
    # No autosave: a test that runs a notebook must never write it back. Terminals keep their
    # text in the page (for screen readers), where a test can read it.
    for extension, setting in (("docmanager-extension", {"autosave": False}),
                               ("terminal-extension", {"screenReaderMode": True})):
        settings = tmp_path / "jupyterlab_settings_dir" / "@jupyterlab" / extension
        settings.mkdir(parents=True)
        (settings / "plugin.jupyterlab-settings").write_text(json.dumps(setting))
    log = tmp_path / "lab.log"
    server = subprocess.Popen(command, cwd=ROOT, env=env, start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=open(log, "w"))
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                urllib.request.urlopen(f"{base}/api/status?token={TOKEN}", timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("JupyterLab did not start:\n" + log.read_text()[-2000:]) from None
                time.sleep(0.5)
        yield base
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
