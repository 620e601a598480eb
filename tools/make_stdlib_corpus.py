"""Make the language-model corpus that ships with the course: about 1 MB of Python source,
modules of the standard library of one CPython release, copied byte for byte.

    python3.11 tools/make_stdlib_corpus.py      # the shipped snapshot: CPython 3.11.7

It reads the modules of the interpreter that runs it (sysconfig's "stdlib" directory) and
writes tfcourse/texts/python_stdlib/: each module as <name>.py.txt (".txt", so that no tool
takes them for the course's own code), CPython's LICENSE.txt (the PSF licence they are under),
manifest.json (release, files, split, sizes, SHA-256) and README.md. Another release gives
other bytes: the script refuses one other than RELEASE unless given --release.

Held-out splits are whole files, so that validation text is never a neighbour of training
text: "val" to watch training, "test" to report.
"""

import argparse
import hashlib
import json
import platform
import shutil
import sys
import sysconfig
from pathlib import Path

RELEASE = "3.11.7"
OUT = Path(__file__).resolve().parents[1] / "tfcourse" / "texts" / "python_stdlib"

# Familiar, self-contained pure-Python modules: about 0.97 MB to train on, 48 KB each held out.
TRAIN = (
    "abc", "argparse", "ast", "base64", "bisect", "calendar", "colorsys", "contextlib", "copy",
    "csv", "dataclasses", "datetime", "difflib", "enum", "fnmatch", "functools", "glob",
    "graphlib", "gzip", "numbers", "operator", "pathlib", "pprint", "random", "sched", "secrets",
    "shutil", "statistics", "string", "tokenize", "weakref",
)
VAL = ("fractions", "textwrap")
TEST = ("heapq", "queue", "shlex")

README = """\
# Python standard library corpus (language-model data of chapter 09)

{n_files} modules of the Python standard library, taken from CPython {release}
(`Lib/<module>.py`, stored here as `<module>.py.txt`), split by file: {train_bytes:,} bytes
to train on, {val_bytes:,} for validation ({val}) and {test_bytes:,} for test
({test}).
`manifest.json` lists every file with its split, size and SHA-256.

Made by `python3.11 tools/make_stdlib_corpus.py` on CPython {release}.

Licence: these files are part of Python, distributed under the PSF License Agreement, whose
full text, with the history of the software, is `LICENSE.txt` (CPython's licence file, copied
unchanged). PSF's notice of copyright: "Copyright (c) 2001, 2002, 2003, 2004, 2005, 2006,
2007, 2008, 2009, 2010, 2011, 2012, 2013, 2014, 2015, 2016, 2017, 2018, 2019, 2020, 2021,
2022, 2023 Python Software Foundation; All Rights Reserved". Changes made: none to the
contents; each file is renamed from `<module>.py` to `<module>.py.txt`. The rest of tfcourse
is under its own licence.
"""


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--release", default=RELEASE,
                        help=f"the CPython release that must run this script (default {RELEASE})")
    args = parser.parse_args(argv)
    running = platform.python_version()
    if platform.python_implementation() != "CPython" or running != args.release:
        sys.exit(f"this makes the corpus of CPython {args.release}, but runs on "
                 f"{platform.python_implementation()} {running} (see --release)")
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    files = []
    for split, names in (("train", TRAIN), ("val", VAL), ("test", TEST)):
        for name in names:
            data = (stdlib / f"{name}.py").read_bytes()
            data.decode("utf-8")  # the corpus is read as UTF-8 text
            (OUT / f"{name}.py.txt").write_bytes(data)
            files.append({"file": f"{name}.py.txt", "source": f"Lib/{name}.py", "split": split,
                          "bytes": len(data), "sha256": sha256(data)})
    shutil.copyfile(stdlib / "LICENSE.txt", OUT / "LICENSE.txt")
    sizes = {s: sum(f["bytes"] for f in files if f["split"] == s) for s in ("train", "val", "test")}
    manifest = {
        "name": "python_stdlib",
        "source": f"CPython {running}, Lib/",
        "licence": "PSF License Agreement (LICENSE.txt)",
        "command": "python3.11 tools/make_stdlib_corpus.py",
        "bytes": sizes,
        "files": files,
    }
    (OUT / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    (OUT / "README.md").write_text(README.format(
        n_files=len(files), release=running, train_bytes=sizes["train"], val_bytes=sizes["val"],
        test_bytes=sizes["test"], val=", ".join(f"`{n}`" for n in VAL),
        test=", ".join(f"`{n}`" for n in TEST)))
    print(f"{OUT}: {len(files)} files, {sizes}")


if __name__ == "__main__":
    main()
