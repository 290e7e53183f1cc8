#include "operator/controller/names.h"

#include <set>
#include <string>

#include <gtest/gtest.h>

namespace orrery::controller {
namespace {

TEST(NamesTest, HashIsFnv1a) {
  // The FNV-1a 64-bit test vectors.
  EXPECT_EQ(Fnv1a64(""), 0xcbf29ce484222325ULL);
  EXPECT_EQ(Fnv1a64("a"), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(HashHex("a", 16), "af63dc4c8601ec8c");
  EXPECT_EQ(HashHex("a"), "af63dc4c86");
}

TEST(NamesTest, PodNamesAreStableReadableAndValid) {
  std::string a = GangPodName("sweep", "mlp-lr-1e-3", 0, 1);
  EXPECT_EQ(a, GangPodName("sweep", "mlp-lr-1e-3", 0, 1));
  EXPECT_EQ(a.rfind("sweep-mlp-lr-1e-3-g0-r1-", 0), 0u) << a;
  EXPECT_TRUE(IsDns1035Label(a)) << a;
}

TEST(NamesTest, UniqueAcrossJobsTasksGenerationsAndRanks) {
  std::set<std::string> seen;
  int n = 0;
  for (const char* job : {"sweep", "sweep-2", "a"}) {
    for (const std::string& task : {std::string("mlp"), std::string("mlp-lr-3e-4"),
                                    std::string("gpt-r7"), std::string(40, 'x')}) {
      for (int gen = 0; gen < 3; ++gen) {
        seen.insert(GangServiceName(job, task, gen));
        ++n;
        for (int rank = 0; rank < 16; ++rank) {
          seen.insert(GangPodName(job, task, gen, rank));
          ++n;
        }
      }
    }
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(n));
  for (const std::string& s : seen) EXPECT_TRUE(IsDns1035Label(s)) << s;
}

TEST(NamesTest, JoinAmbiguityIsResolvedByTheHash) {
  // job "a-b" task "c" and job "a" task "b-c" read the same; the hash differs.
  EXPECT_NE(GangPodName("a-b", "c", 0, 0), GangPodName("a", "b-c", 0, 0));
  EXPECT_NE(GangServiceName("a-b", "c", 0), GangServiceName("a", "b-c", 0));
}

TEST(NamesTest, LongNamesAreCutToSixtyThreeWithTheHashKept) {
  std::string job(253, 'j');  // a custom resource name may be a 253-char subdomain
  std::string task(63, 't');
  std::string a = GangPodName(job, task, 12, 511);
  std::string b = GangPodName(job, task, 12, 510);
  EXPECT_LE(a.size(), kMaxNameLength);
  EXPECT_TRUE(IsDns1035Label(a)) << a;
  EXPECT_NE(a, b);
  EXPECT_LE(GangServiceName(job, task, 12).size(), kMaxNameLength);
  EXPECT_LE(ProfilePodName(job, "sig|ddp|8|64|cuda", 7).size(), kMaxNameLength);
}

TEST(NamesTest, SubdomainJobNamesBecomeLabels) {
  // Dots, upper case and a leading digit are fine in a job name, not in a Service name.
  std::string s = GangServiceName("9.Sweep.v2", "mlp", 0);
  EXPECT_TRUE(IsDns1035Label(s)) << s;
  EXPECT_EQ(s.rfind("o-9-sweep-v2-mlp-g0-", 0), 0u) << s;
}

TEST(NamesTest, LabelValues) {
  EXPECT_EQ(LabelValue("sweep.v2"), "sweep.v2");
  std::string long_value(100, 'a');
  std::string v = LabelValue(long_value);
  EXPECT_TRUE(IsLabelValue(v)) << v;
  EXPECT_NE(v, LabelValue(long_value + "b"));
  EXPECT_EQ(GangLabelValue("mlp", 3), "mlp-g3");
  EXPECT_TRUE(IsLabelValue(GangLabelValue(std::string(63, 'x'), 3)));
  EXPECT_FALSE(IsLabelValue("-a"));
  EXPECT_FALSE(IsLabelValue("a/b"));
}

TEST(NamesTest, ProfileKeyHashIsDnsSafeAndDistinct) {
  std::string a = ProfileKeyHash("gpt/synthetic/b8|ddp|2|8|cuda");
  std::string b = ProfileKeyHash("gpt/synthetic/b8|ddp|4|8|cuda");
  EXPECT_NE(a, b);
  EXPECT_EQ(a.size(), 17u);
  EXPECT_TRUE(IsDns1035Label(a));
  EXPECT_TRUE(IsLabelValue(a));
}

TEST(NamesTest, Dns1035Checks) {
  EXPECT_TRUE(IsDns1035Label("a"));
  EXPECT_FALSE(IsDns1035Label(""));
  EXPECT_FALSE(IsDns1035Label("1a"));
  EXPECT_FALSE(IsDns1035Label("a-"));
  EXPECT_FALSE(IsDns1035Label("a.b"));
  EXPECT_FALSE(IsDns1035Label(std::string(64, 'a')));
}

}  // namespace
}  // namespace orrery::controller
