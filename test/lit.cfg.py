# -*- Python -*-
import os

import lit.formats
from lit.llvm import llvm_config
from lit.llvm.subst import ToolSubst

config.name = "LLM-OPT"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.excludes = ["Inputs", "CMakeLists.txt", "README.md", "lit.cfg.py", "lit.site.cfg.py"]
config.test_source_root = os.path.dirname(__file__)
# A second run of part of the suite (ctest lit-runtime-seed7) keeps its
# outputs apart: --param llmopt_exec_root=DIR.
config.test_exec_root = lit_config.params.get(
    "llmopt_exec_root", os.path.join(config.llmopt_obj_root, "test"))

config.substitutions.append(("%PATH%", config.environment["PATH"]))
config.substitutions.append(("%examples", os.path.join(config.llmopt_source_dir, "examples")))
config.substitutions.append(("%data", os.path.join(config.llmopt_source_dir, "data")))
config.environment["FILECHECK_OPTS"] = "--enable-var-scope --dump-input=fail"

llvm_config.with_system_environment(["HOME", "INCLUDE", "LIB", "TMP", "TEMP"])
# llm-run's default seed in the second-seed run of the runtime tests (an
# explicit --seed wins): the equivalence tests must hold at any seed.
# The same run stages every collective through host copies (LLMOPT_COMM).
for name in ("LLMOPT_TEST_SEED", "LLMOPT_COMM"):
    if name in os.environ:
        config.environment[name] = os.environ[name]
llvm_config.use_default_substitutions()

tool_dirs = [config.llmopt_tools_dir, config.llvm_tools_dir]
tools = ["llm-opt", "llm-calibrate", "llm-translate", "llm-run", "llm-data", "llm-ckpt", "llm-c-api-demo"]
llvm_config.add_tool_substitutions(tools, tool_dirs)
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)

# Multi-process tests need OpenMPI and a runtime built with it. As root,
# mpirun needs to be told that is fine; more ranks than cores need
# --oversubscribe (the tests pass it).
import shutil
if getattr(config, "llmopt_have_mpi", False) and shutil.which("mpirun"):
    config.available_features.add("mpi")
    config.environment["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
    config.environment["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    config.environment["OMPI_MCA_rmaps_base_oversubscribe"] = "1"

# The generated CUDA source is compiled (not run) where nvcc is installed.
nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
if nvcc:
    config.available_features.add("nvcc")
    config.substitutions.append(("%nvcc", nvcc))

# llm-run built with the CUDA backend (its load-time checks run without a
# GPU: llm-run --check-cuda).
if getattr(config, "llmopt_have_cuda", False):
    config.available_features.add("cuda-build")

# The CUDA backend runs where a GPU is (and llm-run was built with CUDA).
import subprocess
try:
    gpus = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    if gpus.returncode == 0 and "GPU" in gpus.stdout:
        config.available_features.add("cuda-device")
        # Two GPUs or more: NCCL between them (cuda-nccl.test).
        if sum(line.startswith("GPU ") for line in gpus.stdout.splitlines()) >= 2:
            config.available_features.add("cuda-multi-device")
except (OSError, subprocess.SubprocessError):
    pass
