#include "worker/main/blas_core.h"

#include <map>
#include <string>

#include <gtest/gtest.h>

namespace orrery::worker {
namespace {

CpuFeatures Avx512() {
  CpuFeatures f;
  f.avx2 = f.fma = f.avx512f = f.avx512bw = f.avx512vl = f.avx512dq = true;
  return f;
}

CpuFeatures Avx2Only() {
  CpuFeatures f;
  f.avx2 = f.fma = true;
  return f;
}

struct Env {
  std::map<std::string, std::string> vars;
  std::function<const char*(const char*)> fn() const {
    return [this](const char* n) -> const char* {
      auto it = vars.find(n);
      return it == vars.end() ? nullptr : it->second.c_str();
    };
  }
};

TEST(BlasCoreTest, AGenericCoreOnAnAvx512CpuAsksForSkylakeX) {
  Env env;
  EXPECT_EQ(BetterOpenBlasCore("Prescott", Avx512(), env.fn()), "SkylakeX");
  EXPECT_EQ(BetterOpenBlasCore("Nehalem", Avx512(), env.fn()), "SkylakeX");
  EXPECT_EQ(BetterOpenBlasCore("Sandybridge", Avx2Only(), env.fn()), "Haswell");
}

TEST(BlasCoreTest, AGoodChoiceOrAnOldCpuIsLeftAlone) {
  Env env;
  EXPECT_EQ(BetterOpenBlasCore("SkylakeX", Avx512(), env.fn()), "");
  EXPECT_EQ(BetterOpenBlasCore("Haswell", Avx512(), env.fn()), "");
  EXPECT_EQ(BetterOpenBlasCore("Zen", Avx2Only(), env.fn()), "");
  EXPECT_EQ(BetterOpenBlasCore("Prescott", CpuFeatures{}, env.fn()), "");  // no AVX2: right
  EXPECT_EQ(BetterOpenBlasCore("", Avx512(), env.fn()), "");
}

TEST(BlasCoreTest, TheUsersChoiceAndTheRerunAreNeverOverridden) {
  Env user{{{"OPENBLAS_CORETYPE", "Prescott"}}};
  EXPECT_EQ(BetterOpenBlasCore("Prescott", Avx512(), user.fn()), "");
  Env rerun{{{"ORRERY_OPENBLAS_RETUNED", "1"}}};
  EXPECT_EQ(BetterOpenBlasCore("Prescott", Avx512(), rerun.fn()), "");
  Env empty{{{"OPENBLAS_CORETYPE", ""}}};  // set but empty: not a choice
  EXPECT_EQ(BetterOpenBlasCore("Prescott", Avx512(), empty.fn()), "SkylakeX");
}

}  // namespace
}  // namespace orrery::worker
