#!/bin/bash
# Copy task, 150 steps, with one core kept busy by `yes`, at 2 threads, 1 thread and auto; then quiet at 2 threads.
# What a busy CPU does to training (README, "A busy computer"). Usage: bash tools/busy_cpu.sh
cd "$(dirname "$0")/.."; T=.venv/bin/tfcourse; D=$(mktemp -d)
run() { /usr/bin/time -f "%e s" $T train --task copy --steps 150 --eval-every 1000 --no-progress --examples 0 --overwrite --out $D/x.pt "$@" 2>&1 | tail -1; }
for k in 1 2; do
  yes > /dev/null & Y=$!
  echo "busy, --threads 2, spinning threads: $(OMP_WAIT_POLICY=ACTIVE run --threads 2)"
  echo "busy, --threads 2: $(run --threads 2)"
  echo "busy, --threads 1: $(run --threads 1)"
  echo "busy, --threads auto: $(run --threads auto)"
  kill $Y
  echo "quiet, --threads 2: $(run --threads 2)"
  echo "quiet, --threads 1: $(run --threads 1)"
done
