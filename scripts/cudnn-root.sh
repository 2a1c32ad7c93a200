#!/usr/bin/env bash
# Prints the folder whose include/cudnn.h and lib/libcudnn.so* a GPU build uses (cmake
# -DTG_CUDNN_ROOT=<it>): the CUDA toolkit's when it has cuDNN, else PyTorch's nvidia-cudnn
# wheel's. Prints nothing and exits 1 when there is neither (the build then has no cuDNN path).
set -euo pipefail
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
toolkit=$(cd "$(dirname "$nvcc")/.." 2>/dev/null && pwd || true)
if [ -n "$toolkit" ] && [ -f "$toolkit/include/cudnn.h" ]; then echo "$toolkit"; exit 0; fi
wheel=$(python3 -c 'import nvidia.cudnn as m; print(list(m.__path__)[0])' 2>/dev/null || true)
if [ -n "$wheel" ] && [ -f "$wheel/include/cudnn.h" ]; then echo "$wheel"; exit 0; fi
exit 1
