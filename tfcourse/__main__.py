"""The `tfcourse` command (and `python -m tfcourse`, e.g. under torchrun): tfcourse.cli, whose
first second goes to loading torch; Ctrl-C then ends it with one line, not a traceback."""

import os
import signal
import sys


def _load_cli():
    """tfcourse.cli.main, imported with Ctrl-C held back until the import is done: an interrupt
    inside a C extension's first import (numpy's, under torch) leaves it half-loaded, and
    Python then fails with an ImportError instead of KeyboardInterrupt. A Ctrl-C that the
    parent process ignores (SIG_IGN, e.g. `trap '' INT`) stays ignored."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        from tfcourse.cli import main as run

        return run
    pressed = []
    previous = signal.signal(signal.SIGINT, lambda *_: pressed.append(True))
    try:
        from tfcourse.cli import main as run
    finally:
        signal.signal(signal.SIGINT, previous)
    if pressed:
        raise KeyboardInterrupt
    return run


def main() -> int:
    try:
        code = _load_cli()()
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    if int(os.environ.get("WORLD_SIZE", 1)) > 1:  # a torchrun worker: see the function
        from tfcourse.device import leave_torchrun_process

        leave_torchrun_process(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
