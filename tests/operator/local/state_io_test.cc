// Tests for reading the worker's "checkpoint" and "restore" lines into the
// report's records, the event line of a restore, and the cap on saves kept.
#include "operator/local/state_io.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace orrery::local {
namespace {

using nlohmann::json;

json Line(const char* text) { return json::parse(text); }

TEST(ParseStateIo, ASaveSumsItsRanksAndKeepsTheLargestPeak) {
  auto io = ParseStateIo(Line(R"({"event":"checkpoint","step":50,"path":"/c/step-50",
      "reason":"periodic","seconds":0.25,"bytes":3000,
      "ranks":[{"bytes":1000,"bytes_needed":1000,"reads":0,"seconds":0.2,
                "peak_rss_bytes":200000000,"rss_before_bytes":1},
               {"bytes":2000,"bytes_needed":2000,"reads":0,"seconds":0.25,
                "peak_rss_bytes":210000000,"rss_before_bytes":1}]})"),
                         12.5);
  ASSERT_TRUE(io.has_value());
  EXPECT_EQ(io->op, "save");
  EXPECT_EQ(io->time_s, 12.5);
  EXPECT_EQ(io->step, 50);
  EXPECT_EQ(io->reason, "periodic");
  EXPECT_EQ(io->bytes, 3000);
  EXPECT_EQ(io->bytes_needed, 3000);
  EXPECT_EQ(io->seconds, 0.25);
  EXPECT_EQ(io->peak_rss_bytes, 210000000);
  EXPECT_EQ(io->ranks, 2);
  EXPECT_TRUE(io->from_layout.empty());
  EXPECT_TRUE(io->layout.empty());  // a save's layout is the gang's, from its "start" line
}

TEST(ParseStateIo, ARestoreKeepsBothLayoutsAndItsTotals) {
  auto io = ParseStateIo(Line(R"({"event":"restore","step":40,"path":"/c/step-40",
      "from_layout":"dp=4,tp=1,pp=1,fsdp=4","layout":"dp=1,tp=2,pp=2","seconds":0.08,
      "bytes_read":12300000,"bytes_needed":12300000,
      "ranks":[{"bytes":3000000,"bytes_needed":3000000,"peak_rss_bytes":150000000},
               {"bytes":3100000,"bytes_needed":3100000,"peak_rss_bytes":210000000},
               {"bytes":3100000,"bytes_needed":3100000,"peak_rss_bytes":190000000},
               {"bytes":3100000,"bytes_needed":3100000,"peak_rss_bytes":180000000}]})"),
                         3);
  ASSERT_TRUE(io.has_value());
  EXPECT_EQ(io->op, "restore");
  EXPECT_EQ(io->step, 40);
  EXPECT_EQ(io->from_layout, "dp=4,tp=1,pp=1,fsdp=4");
  EXPECT_EQ(io->layout, "dp=1,tp=2,pp=2");
  EXPECT_EQ(io->bytes, 12300000);
  EXPECT_EQ(io->bytes_needed, 12300000);
  EXPECT_EQ(io->peak_rss_bytes, 210000000);
  EXPECT_EQ(io->ranks, 4);
  EXPECT_EQ(RestoreEventText("lr-1e-3", *io),
            "lr-1e-3 re-sharded step 40 from dp=4,tp=1,pp=1,fsdp=4 into dp=1,tp=2,pp=2: "
            "read 12.3 MB of 12.3 MB needed in 0.08 s (peak RSS 210 MB)");
}

TEST(ParseStateIo, TotalsComeFromTheRanksWhenTheLineLacksThem) {
  auto io = ParseStateIo(Line(R"({"event":"restore","step":7,"layout":"dp=1",
      "from_layout":"dp=1","ranks":[{"bytes":10,"bytes_needed":12}]})"),
                         0);
  ASSERT_TRUE(io.has_value());
  EXPECT_EQ(io->bytes, 10);
  EXPECT_EQ(io->bytes_needed, 12);
  EXPECT_EQ(io->peak_rss_bytes, 0);
  // The same layout: a restore, not a re-shard; no peak reported, none shown.
  EXPECT_EQ(RestoreEventText("t", *io),
            "t restored step 7 in dp=1: read 10 B of 12 B needed in "
            "0.00 s");
}

TEST(ParseStateIo, OtherLinesAndMalformedFieldsAreNotTrusted) {
  EXPECT_FALSE(ParseStateIo(Line(R"({"event":"progress","step":3})"), 0).has_value());
  EXPECT_FALSE(ParseStateIo(Line(R"({"event":"checkpoint"})"), 0).has_value());
  EXPECT_FALSE(ParseStateIo(Line(R"({"event":"checkpoint","step":"50"})"), 0).has_value());
  EXPECT_FALSE(ParseStateIo(Line(R"([1,2])"), 0).has_value());
  // Wrong types count as absent; the line still says a save happened.
  auto io = ParseStateIo(Line(R"({"event":"checkpoint","step":5,"bytes":"many","seconds":null,
      "reason":3,"ranks":[7,{"bytes":-1,"peak_rss_bytes":"x"}]})"),
                         0);
  ASSERT_TRUE(io.has_value());
  EXPECT_EQ(io->step, 5);
  EXPECT_EQ(io->bytes, 0);  // a negative count is no count
  EXPECT_EQ(io->seconds, 0);
  EXPECT_EQ(io->reason, "");
  EXPECT_EQ(io->ranks, 1);
  EXPECT_EQ(io->peak_rss_bytes, 0);
}

TEST(AppendStateIo, KeepsEveryRestoreAndTheNewestSaves) {
  std::vector<ReportStateIo> records;
  ReportStateIo restore;
  restore.op = "restore";
  restore.step = 0;
  AppendStateIo(&records, restore, 3);
  for (int64_t step = 1; step <= 5; ++step) {
    ReportStateIo save;
    save.op = "save";
    save.step = step;
    AppendStateIo(&records, save, 3);
  }
  ASSERT_EQ(records.size(), 4u);
  EXPECT_EQ(records[0].op, "restore");
  EXPECT_EQ(records[1].step, 3);
  EXPECT_EQ(records[3].step, 5);
}

}  // namespace
}  // namespace orrery::local
