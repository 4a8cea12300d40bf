#!/usr/bin/env bash
# The device measurements of studies, threads and the GPU (and Hybrid on a GPU), in parts that each fit one call of the
# device tool: bash benchmarks/device_run.sh A|B. Run from the repository root on a machine with
# CUDA PyTorch; writes to $OUT (the tool's output folder). Wheels of what the machine lacks
# (array-api-compat, array-api-strict, performer-pytorch and its small dependencies) are in .whl/.
# A: machine, GPU RFA vs performer-pytorch, threads (1, 2, 8, 16), performer-mse serial / 8 workers /
#    GPU (NumPy and device draws), Hybrid on the GPU, the thread scaling of the pool's projection
#    draws and model products (1, 2, 8, 16), the GPU cases of the changed code's tests.
# B: studies on the GPU with draws on the device, and the GPU test subset again.
# C1 .. C4: real-attention's full profile on the GPU. Its 12 cache entries of model queries, keys and
#    values (199 MiB, more than one call carries) travel in four parts, .devcache/p1 .. p4 (each
#    carried by its call, gathered in ~/rfcache on the warm machine); C4 then runs the study with the
#    weights hidden (every cell must be a cache hit) and reports its whole-process time.
#    Make the parts first, on this machine: bash benchmarks/device_run.sh P (it reads every cell of
#    the study once, which fills the local cache, and copies the entries it read into the parts;
#    keep .devcache/ out of git, e.g. in .git/info/exclude).
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/device-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || echo "wheel install failed"
export PYTHONPATH=/tmp/site:$PWD
TESTS="tests/unit/test_attention_backends.py tests/unit/test_attention_hybrid_backends.py tests/studies/test_device_draws.py tests/studies/test_study_backend.py tests/unit/test_accelerator_layout.py"
case "${1:-A}" in
A)
  { nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; echo "cpus: $(nproc)";
    python3 -c "import torch, numpy, scipy, pandas; print('torch', torch.__version__, 'numpy', numpy.__version__, 'scipy', scipy.__version__, 'pandas', pandas.__version__)";
    lscpu | grep -E 'Model name|^CPU\(s\)|Thread'; } > "$OUT/machine.txt" 2>&1
  cat "$OUT/machine.txt"
  timeout 210 python3 benchmarks/bench_scale.py --sections gpu,threads,studies --threads 1,2,8,16 \
    --workers 8 --study-backend torch --out "$OUT" 2>&1 | grep -v Warning | tail -45
  timeout 90 python3 benchmarks/device_hybrid.py --out "$OUT/hybrid.md" 2>&1 | tail -12
  timeout 60 python3 benchmarks/bench_pool_scaling.py --threads 1,2,8,16 --out "$OUT/pool" 2>&1 | tail -3
  timeout 100 python3 -m pytest -q -x -p no:cacheprovider -W default -k "cuda or CUDA or gpu or torch" $TESTS \
    > "$OUT/gpu-tests.txt" 2>&1
  tail -6 "$OUT/gpu-tests.txt"
  ;;
B)
  timeout 200 python3 benchmarks/bench_scale.py --sections gpu-studies --gpu-study-draws backend \
    --gpu-studies "performer-mse;softmax-kernel-estimators:set=norm-0.5,norm-1.0,norm-1.5,seed004" \
    --out "$OUT/gs" 2>&1 | grep -v Warning | tail -12
  timeout 150 python3 -m pytest -q -p no:cacheprovider -W default -k "cuda or CUDA or gpu or torch" $TESTS \
    > "$OUT/gpu-tests-b.txt" 2>&1
  tail -6 "$OUT/gpu-tests-b.txt"
  ;;
P)
  .venv/bin/python - <<'PY'
import shutil
from pathlib import Path

import rfkit.data._qk as qk
import rfkit.study as st
from rfkit.study._cell_data import cell_data

read = []
orig = qk.read_arrays
qk.read_arrays = lambda path, *a, **k: (read.append(Path(path)), orig(path, *a, **k))[1]
design = st.load_design(st.builtin_study("real-attention"), allow_large=True)
for cell in design.cells():
    cell_data(design, cell, 0, ())
entries = sorted(set(read))
for i, path in enumerate(entries):
    dest = Path(".devcache") / f"p{i // 3 + 1}" / path.parent.name
    dest.mkdir(parents=True, exist_ok=True)
    for f in (path, path.with_name(path.name + ".sha256")):
        shutil.copy2(f, dest / f.name)
print(f"{len(entries)} cache entries in .devcache/p1 .. p{-(-len(entries) // 3)}")
PY
  ;;
C1|C2|C3|C4)
  mkdir -p "$HOME/rfcache" && for part in .devcache/p*; do cp -r "$part/." "$HOME/rfcache/"; done
  echo "cache entries gathered: $(ls "$HOME/rfcache"/*/*.npz | wc -l) of 12"
  if [ "$1" = C4 ]; then
    { nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; echo "cpus: $(nproc)"; } > "$OUT/machine.txt" 2>&1
    cat "$OUT/machine.txt"
    export RFKIT_CACHE=$HOME/rfcache RFKIT_MINILM_DIR=/nonexistent RFKIT_SMOLLM2_DIR=/nonexistent
    start=$(date +%s.%N)
    timeout "${RA_TIMEOUT:-480}" python3 -m rfkit.cli run real-attention --backend torch --device cuda \
      --draws backend --workers "${RA_WORKERS:-8}" --allow-large --no-progress --out /tmp/ra-gpu > "$OUT/real-attention.log" 2>&1
    rc=$?
    end=$(date +%s.%N)
    echo "real-attention full, torch cuda, draws=backend, workers ${RA_WORKERS:-8}: rc $rc, $(python3 -c "print(round($end - $start, 1))") s wall, $(ls /tmp/ra-gpu/parts 2>/dev/null | grep -c trials) unit files" | tee "$OUT/real-attention.txt"
    tail -5 "$OUT/real-attention.log"
    cp /tmp/ra-gpu/summary.csv "$OUT/" 2>/dev/null
  fi
  ;;
esac
