"""Score the exercise checks on a set of wrong solutions (or correct controls).

    python tools/score_mistakes.py SET_DIR [--out results.tsv] [--jobs 2]

SET_DIR holds solution files (each a whole exercise file with one item written wrong, or
right for a control) and manifest.tsv: `file  item  mistake  source`, tab-separated, with a
header; item as "ex01_attention.scaled_dot_product_attention" (several, comma-separated, for
a control that writes more than one). Each solution is checked in its own Python, under the
exercise's own file name, exactly as `pytest exercises` would check it, and the first line
of each failure is written to the results beside the mistake it was meant to show.

The outcome column: `passed` (the worst result for a wrong solution), `generic` (a line
that names no mistake: "no common mistake matches", an exception, a wrong shape or dtype, a
non-finite result, or a checker bug), or `specific` (a catalogued mistake, or an
explanation of what the result is: a person then reads the line beside the mistake and
judges it named or misnamed). How the last figures were made is in the README's checks
section.
"""

import argparse
import csv
import json
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GENERIC = {"no_match", "raised", "wrong_shape", "wrong_dtype", "wrong_type", "not_finite", "too_slow",
           "checker_bug", "import_failed", "import_too_slow", "import_exited", "syntax_error",
           "missing", "not_class", "not_implemented"}

WORKER = """
import json, sys
from tfcourse.checking.entry import diagnose, item, load_exercise, _learner_item
path, keys = sys.argv[1], sys.argv[2].split(",")
found = []
for key in keys:
    it = item(key)
    d = diagnose(lambda: it.check(_learner_item(load_exercise(path), it, path.rsplit("/", 1)[-1])))
    found.append(None if d is None else {"key": d.key, "line": d.first_line})
print(json.dumps(found))
"""


def score(solution: Path, keys: str, timeout: int) -> list:
    """[None (passed) or {"key", "line"}] for each item of `keys`, checked in a fresh Python."""
    exercise = keys.split(",")[0].split(".")[0]
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / f"{exercise}.py"
        shutil.copy(solution, target)
        try:
            done = subprocess.run([sys.executable, "-c", WORKER, str(target), keys], cwd=ROOT,
                                  capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return [{"key": "too_slow", "line": f"(the worker took over {timeout} s)"}]
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return [{"key": "checker_bug", "line": (done.stderr.strip().splitlines() or ["?"])[-1]}]


def outcome(results: list) -> str:
    if all(r is None for r in results):
        return "passed"
    failed = [r for r in results if r is not None]
    return "generic" if all(r["key"] in GENERIC for r in failed) else "specific"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("set", type=Path, help="a folder with manifest.tsv and the solutions")
    parser.add_argument("--out", type=Path, help="results (TSV); default SET/results.tsv")
    parser.add_argument("--jobs", type=int, default=2, help="solutions checked at once")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per solution")
    args = parser.parse_args(argv)
    with open(args.set / "manifest.tsv", newline="") as f:
        rows = [r for r in csv.DictReader(f, delimiter="\t") if r.get("file")]
    start = time.time()
    with ThreadPoolExecutor(args.jobs) as pool:
        found = list(pool.map(lambda r: score(args.set / r["file"], r["item"], args.timeout), rows))
    out = args.out or args.set / "results.tsv"
    counts = {}
    with open(out, "w", newline="") as f:
        writer = csv.writer(f, delimiter="\t", lineterminator="\n")
        writer.writerow(["file", "item", "mistake", "outcome", "key", "first_line"])
        for row, results in zip(rows, found):
            kind = outcome(results)
            counts[kind] = counts.get(kind, 0) + 1
            failed = [r for r in results if r is not None]
            writer.writerow([row["file"], row["item"], row["mistake"], kind,
                             ",".join(r["key"] for r in failed),
                             " | ".join(r["line"] for r in failed)])
    print(f"{len(rows)} solutions in {time.time() - start:.0f} s: "
          + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + f"; results in {out}")


if __name__ == "__main__":
    main()
