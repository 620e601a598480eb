"""The `tfcourse` command (and `python -m tfcourse`, e.g. under torchrun): tfcourse.cli, whose
first second goes to loading torch; Ctrl-C then ends it with one line, not a traceback."""

import os
import sys


def main() -> int:
    try:
        from tfcourse.cli import main as run

        code = run()
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    if int(os.environ.get("WORLD_SIZE", 1)) > 1:  # a torchrun worker: see the function
        from tfcourse.device import leave_torchrun_process

        leave_torchrun_process(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
