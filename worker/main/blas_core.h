// OpenBLAS's kernels on CPUs it does not recognise. Debian's OpenBLAS (under
// Debian's LibTorch) is built for many CPUs and picks its kernels at load time
// from the CPU's model number; a virtual machine that reports a generic model
// ("Intel(R) Xeon(R) Processor", common in clouds and in CI) gets the oldest
// x86-64 kernels, "Prescott" (SSE3), on a CPU with AVX-512. Measured on such a
// VM: GPT-2 small trained 3x slower than with OPENBLAS_CORETYPE=SkylakeX
// (bench/worker/hf_model_bench: 0.50 vs 1.52 samples/s, one thread).
// OpenBLAS reads OPENBLAS_CORETYPE only while it loads, so the worker, finding a
// pre-AVX2 core on a CPU with AVX2 or AVX-512, runs itself again with the core
// its instructions allow. A user's own OPENBLAS_CORETYPE is never overridden.
#pragma once

#include <functional>
#include <string>

namespace orrery::worker {

struct CpuFeatures {
  bool avx2 = false, fma = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
};

// This CPU's features (__builtin_cpu_supports).
CpuFeatures DetectCpuFeatures();

// The OpenBLAS core to ask for, or "" to leave OpenBLAS's choice alone: a core
// only when `chosen` (openblas_get_corename()) is one of OpenBLAS's pre-AVX2
// x86 cores and the CPU can run a better one; never when `env` says the user
// set OPENBLAS_CORETYPE or this process is already the re-run
// (ORRERY_OPENBLAS_RETUNED).
std::string BetterOpenBlasCore(const std::string& chosen, const CpuFeatures& cpu,
                               const std::function<const char*(const char*)>& env);

// When BetterOpenBlasCore names a core: one line on stderr saying why, then
// execv(/proc/self/exe, argv) with OPENBLAS_CORETYPE and ORRERY_OPENBLAS_RETUNED
// set. Returns (doing nothing) without OpenBLAS, when its choice is fine, or if
// the exec fails.
void RetuneOpenBlasOrReturn(char** argv);

}  // namespace orrery::worker
