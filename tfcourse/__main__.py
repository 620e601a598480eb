"""The `tfcourse` command (and `python -m tfcourse`, e.g. under torchrun): tfcourse.cli, whose
first second goes to loading torch; Ctrl-C then ends it with one line, not a traceback."""

import sys


def main() -> int:
    try:
        from tfcourse.cli import main as run

        return run()
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
