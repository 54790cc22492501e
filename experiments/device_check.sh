#!/usr/bin/env bash
# The device learner on a GPU machine: its CUDA tests, then the learner benchmark.
#
#   bash experiments/device_check.sh            # ~5 minutes on one H100/H200
#   SECONDS_PER_ROW=5 bash experiments/device_check.sh
#
# Needs every optional package the tests use (the tuned Atari and MuJoCo files compose in
# tests/test_config.py): on the accelerator machine, the wheels of
# `../shared/tools/device-wheels.sh --atari --mujoco`. On two GPUs the NCCL tests run too.
#
# Prints the pytest summary of every test file with CUDA tests (which skip on CI,
# and its CPU tests of the same code paths), then the benchmark table LAST: updates/s of a bare PyTorch loop and of
# drlmpi's CPU learner (one CPU thread), and of drlmpi on cuda - eager, CUDA graph, compile, and
# fused (DQN, TD3) - for DQN, TD3 and PPO at batch 64 and 256, with ratios to the bare CPU loop
# and to drlmpi CPU, and each device row's operations per update (--kernels).
# A capture that fails shows as a note on its row (the run falls back to eager), never a crash.
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
python -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(),
torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')"
# Every test that touches CUDA: the files with CUDA tests (skipped without a device: "needs a
# CUDA device") or whose tests ask torch about devices (the two-GPU NCCL tests skip on one GPU).
# Not every file that names "cuda": the MPI job tests of tests/test_sweep.py and
# tests/test_refusals.py assume CI's MPICH (its mpiexec's command line), not the host's Open MPI.
mapfile -t files < <(grep -lE "needs a CUDA device|torch\.cuda\." tests/test_*.py)
# Eight workers: with the project's -n auto (16 on a 16-core host) one worker died on an H200 host
# (docs/results/h200host_dqn_lunar_ttt_paired/cuda_tests_16_workers.log); 8 ran them in 1.7 min.
python -m pytest "${files[@]}" -q -rs -n "${TEST_WORKERS:-8}" -p no:cacheprovider
status=$?
python -m drlmpi.bench.learner --algo dqn td3 ppo --batch 64 256 --device cpu cuda \
    --seconds "${SECONDS_PER_ROW:-3}" --threads 1 --kernels
exit $status
