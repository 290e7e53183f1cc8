// See blas_core.h.
#include "worker/main/blas_core.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <iostream>

namespace orrery::worker {

CpuFeatures DetectCpuFeatures() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512bw = __builtin_cpu_supports("avx512bw");
  f.avx512vl = __builtin_cpu_supports("avx512vl");
  f.avx512dq = __builtin_cpu_supports("avx512dq");
#endif
  return f;
}

std::string BetterOpenBlasCore(const std::string& chosen, const CpuFeatures& cpu,
                               const std::function<const char*(const char*)>& env) {
  auto set = [&](const char* name) {
    const char* v = env(name);
    return v != nullptr && *v != '\0';
  };
  if (set("OPENBLAS_CORETYPE") || set("ORRERY_OPENBLAS_RETUNED")) return "";
  std::string core = chosen;
  std::transform(core.begin(), core.end(), core.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  // OpenBLAS's x86-64 cores without AVX2 kernels (its DYNAMIC_ARCH list).
  static constexpr std::array<const char*, 12> kPreAvx2 = {
      "prescott", "core2",     "penryn", "dunnington",  "nehalem",   "atom",
      "opteron",  "barcelona", "bobcat", "sandybridge", "bulldozer", "nano"};
  if (std::find(kPreAvx2.begin(), kPreAvx2.end(), core) == kPreAvx2.end()) return "";
  if (cpu.avx512f && cpu.avx512bw && cpu.avx512vl && cpu.avx512dq) return "SkylakeX";
  if (cpu.avx2 && cpu.fma) return "Haswell";
  return "";
}

void RetuneOpenBlasOrReturn(char** argv) {
  // Looked up, not linked: a build whose LibTorch has no OpenBLAS has no symbol.
  using CoreName = char* (*)();
  auto corename = reinterpret_cast<CoreName>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  if (corename == nullptr) return;
  const char* chosen = corename();
  std::string better = BetterOpenBlasCore(chosen != nullptr ? chosen : "", DetectCpuFeatures(),
                                          [](const char* n) { return std::getenv(n); });
  if (better.empty()) return;
  std::cerr << "orrery-worker: OpenBLAS chose its " << chosen << " kernels on a CPU with "
            << (better == "SkylakeX" ? "AVX-512" : "AVX2")
            << " (a CPU model it does not know, as virtual machines report); running again "
               "with OPENBLAS_CORETYPE="
            << better << " (set OPENBLAS_CORETYPE yourself to choose)\n";
  setenv("OPENBLAS_CORETYPE", better.c_str(), 1);
  setenv("ORRERY_OPENBLAS_RETUNED", "1", 1);
  execv("/proc/self/exe", argv);
  // Still here: the exec failed; carry on with OpenBLAS's own choice.
  std::cerr << "orrery-worker: could not run again; continuing with " << chosen << "\n";
}

}  // namespace orrery::worker
