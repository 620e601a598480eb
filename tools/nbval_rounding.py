"""Re-run nbval over the notebooks under conditions that change float rounding.

    python tools/nbval_rounding.py                      # every notebook, every condition
    python tools/nbval_rounding.py 04_feed_forward_and_norm --only no-simd

Stored outputs must repeat on any learner's machine, not only on the one that executed the
notebooks. Another CPU changes the order and width of float sums (SIMD width, BLAS kernels,
thread count), which moves the last bits of a result, and a number that depends on those
bits (a long training run's loss, an argmax over near-ties) then prints differently. Each
condition below changes those kernels on this machine; nbval must pass under every one.
"""

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CONDITIONS = {
    "one-thread": {"OMP_NUM_THREADS": "1"},
    "two-threads": {"OMP_NUM_THREADS": "2"},
    # ATen's own kernels (softmax, layer norm, reductions) without SIMD: other sum orders
    "no-simd": {"OMP_NUM_THREADS": "1", "ATEN_CPU_CAPABILITY": "default"},
    # the BLAS (matmul) and oneDNN kernels of an older CPU, MKL's reproducible code path
    "old-blas": {"OMP_NUM_THREADS": "1", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
                 "ONEDNN_MAX_CPU_ISA": "SSE41", "MKL_CBWR": "COMPATIBLE"},
}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", help="names like 04_feed_forward_and_norm (default: all)")
    parser.add_argument("--only", action="append", choices=sorted(CONDITIONS),
                        help="run only this condition (repeatable)")
    args = parser.parse_args(argv)
    paths = [f"notebooks/{n.removesuffix('.ipynb')}.ipynb" for n in args.notebooks] or ["notebooks"]
    results = {}
    for name in args.only or CONDITIONS:
        env = {**os.environ, **CONDITIONS[name]}
        start = time.perf_counter()
        run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *paths],
                             cwd=ROOT, env=env, capture_output=True, text=True)
        summary = (run.stdout.strip().splitlines() or ["(no output)"])[-1]
        results[name] = run.returncode
        status = "ok    " if run.returncode == 0 else "FAILED"
        print(f"{name:12} {status} {time.perf_counter() - start:5.0f} s  {summary}", flush=True)
        if run.returncode:
            print("\n".join(line for line in run.stdout.splitlines() if line.startswith("FAILED")))
    failed = [n for n, rc in results.items() if rc]
    print("every condition passes" if not failed else f"failed under: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
