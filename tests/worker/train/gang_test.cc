// `orrery-worker gang` (worker/train/gang.h, worker/contract/gang_args.h): two
// (and three) spilled tasks trained interleaved in one process each reach the losses of
// training it alone under spill with the same seed, write their own
// checkpoints and progress lines, and a restarted gang resumes both from their
// own newest checkpoints. The command line round-trips, and bad gangs are
// refused naming the flag and the task.
#include "worker/train/gang.h"

#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "tests/worker/checkpoint/temp_dir.h"
#include "tests/worker/parallel/equivalence.h"
#include "worker/checkpoint/store.h"
#include "worker/contract/gang_args.h"

namespace orrery::train {
namespace {

using checkpoint::testing::TempDir;

// An MLP of `layers` hidden layers `width` wide, trained with AdamW at a
// constant rate (so a run cut at any step continues as the whole run would).
std::vector<std::string> MlpTask(const std::string& name, int64_t width, int64_t seed,
                                 int64_t steps, const std::string& ckpt) {
  return {"--task=" + name,
          "--model=mlp",
          "--mlp-input=32",
          "--mlp-hidden=" + std::to_string(width),
          "--mlp-layers=4",
          "--classes=10",
          "--seed=" + std::to_string(seed),
          "--batch=8",
          "--steps=" + std::to_string(steps),
          "--report-every=1",
          "--optimizer=adamw",
          "--lr=0.01",
          "--decay=constant",
          "--checkpoint-dir=" + ckpt,
          "--checkpoint-every=2"};
}

model::ModelConfig MlpModel(int64_t width) {
  model::ModelConfig c = testing_worker::TinyMlp();
  c.mlp = {32, static_cast<int>(width), 4, 10};
  return c;
}

// Each model's largest shard fits a third of the budget, as spill needs; each
// model as a whole does not fit it.
int64_t Budget() {
  return 3 * std::max(testing_worker::LargestLayerBytes(MlpModel(64)),
                      testing_worker::LargestLayerBytes(MlpModel(96)));
}

using Member = std::tuple<std::string, int64_t, int64_t>;  // name, width, seed

// A gang of `members`, each checkpointing in dir/NAME.
std::vector<std::string> GangArgvOf(const std::vector<Member>& members, int64_t steps,
                                    const TempDir& dir) {
  std::vector<std::string> argv = {"--spill-budget-bytes=" + std::to_string(Budget())};
  for (const auto& [name, width, seed] : members) {
    argv.emplace_back("--");
    for (auto& a : MlpTask(name, width, seed, steps, dir.Sub(name))) argv.push_back(a);
  }
  return argv;
}

std::vector<std::string> GangArgv(int64_t steps, const TempDir& dir) {
  return GangArgvOf({{"a", 64, 3}, {"b", 96, 5}}, steps, dir);
}

// The task alone (`train`) under spill with the gang's budget, for six steps,
// checkpointing in `ckpt` (resuming from its newest checkpoint there).
TrainResult AloneIn(const std::string& name, int64_t width, int64_t seed, const std::string& ckpt) {
  std::vector<std::string> argv = MlpTask(name, width, seed, 6, ckpt);
  argv.push_back("--template=spill");
  argv.push_back("--spill-budget-bytes=" + std::to_string(Budget()));
  auto task = ParseTaskFlags(argv);
  EXPECT_TRUE(task.ok()) << task.status();
  std::ostringstream sink;
  auto r = Train(*task, nullptr, sink, nullptr);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : TrainResult{};
}

// The task alone in its own directory.
TrainResult Alone(const std::string& name, int64_t width, int64_t seed, const TempDir& dir) {
  return AloneIn(name, width, seed, dir.Sub("alone-" + name));
}

// `got` is steps [from, from + 3) of `want`, within float tolerance.
void ExpectLosses(const std::vector<double>& got, const std::vector<double>& want, size_t from) {
  ASSERT_EQ(got.size(), 3u);
  ASSERT_LE(from + got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[from + i], 1e-5 * std::max(1.0, std::abs(want[from + i])))
        << "step " << from + i;
}

TEST(GangTest, TwoTasksEqualEachAloneCheckpointApartAndResume) {
  at::set_num_threads(1);
  TempDir dir;
  const TrainResult alone_a = Alone("a", 64, 3, dir);
  const TrainResult alone_b = Alone("b", 96, 5, dir);
  ASSERT_EQ(alone_a.losses.size(), 6u);
  ASSERT_EQ(alone_b.losses.size(), 6u);
  EXPECT_GT(std::abs(alone_a.losses[0] - alone_b.losses[0]), 1e-6);  // two models

  // The gang's first life: three steps of each, checkpoints at 2 and 3.
  auto gang = ParseGangFlags(GangArgv(3, dir));
  ASSERT_TRUE(gang.ok()) << gang.status();
  std::ostringstream out;
  auto first = TrainGang(*gang, out, nullptr);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(first->ok());
  ASSERT_EQ(first->tasks.size(), 2u);
  ExpectLosses(first->tasks[0]->losses, alone_a.losses, 0);
  ExpectLosses(first->tasks[1]->losses, alone_b.losses, 0);
  ASSERT_TRUE(first->choice.has_value());
  EXPECT_GT(first->stats.turns, 0);
  for (const std::string name : {"a", "b"}) {
    auto steps = checkpoint::CheckpointStore(dir.Sub(name), 2).CommittedSteps();
    ASSERT_TRUE(steps.ok()) << steps.status();
    EXPECT_EQ(*steps, (std::vector<int64_t>{2, 3})) << name;
  }
  // Every line is JSON; each task's progress carries its name.
  std::istringstream lines(out.str());
  std::map<std::string, int> progress;
  std::set<std::string> gang_events;
  for (std::string line; std::getline(lines, line);) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("task") && j["event"] == "progress") ++progress[j["task"]];
    if (!j.contains("task")) gang_events.insert(j["event"]);
  }
  EXPECT_EQ(progress["a"], 3);
  EXPECT_EQ(progress["b"], 3);
  EXPECT_EQ(gang_events, (std::set<std::string>{"gang", "interleave", "gang_done"}));

  // Restarted with a longer budget: each resumes from its own step 3.
  gang = ParseGangFlags(GangArgv(6, dir));
  ASSERT_TRUE(gang.ok()) << gang.status();
  std::ostringstream out2;
  auto second = TrainGang(*gang, out2, nullptr);
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_TRUE(second->ok());
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(second->tasks[i]->resumed_from_step, 3);
    EXPECT_EQ(second->tasks[i]->step, 6);
  }
  ExpectLosses(second->tasks[0]->losses, alone_a.losses, 3);
  ExpectLosses(second->tasks[1]->losses, alone_b.losses, 3);
}

// K = 3: three models interleaved each equal itself alone. Stopped after
// three steps, one resumes alone (a plain `train` from its gang checkpoint),
// the other two in another interleaved set (a gang of two), each equal to
// itself alone again.
TEST(GangTest, ThreeTasksEqualEachAloneAndResumeAloneOrInAnotherGang) {
  at::set_num_threads(1);
  TempDir dir;
  const std::vector<Member> three = {{"a", 64, 3}, {"b", 96, 5}, {"c", 80, 7}};
  std::vector<TrainResult> alone;
  for (const auto& [name, width, seed] : three) {
    alone.push_back(Alone(name, width, seed, dir));
    ASSERT_EQ(alone.back().losses.size(), 6u) << name;
  }
  auto gang = ParseGangFlags(GangArgvOf(three, 3, dir));
  ASSERT_TRUE(gang.ok()) << gang.status();
  std::ostringstream out;
  auto first = TrainGang(*gang, out, nullptr);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(first->ok());
  ASSERT_EQ(first->tasks.size(), 3u);
  for (size_t i = 0; i < 3; ++i) ExpectLosses(first->tasks[i]->losses, alone[i].losses, 0);
  EXPECT_GE(first->stats.turns, 3);

  // c alone, from the checkpoint the gang wrote.
  const TrainResult c = AloneIn("c", 80, 7, dir.Sub("c"));
  EXPECT_EQ(c.resumed_from_step, 3);
  EXPECT_EQ(c.step, 6);
  ExpectLosses(c.losses, alone[2].losses, 3);
  // a and b as a gang of two.
  gang = ParseGangFlags(GangArgvOf({three[0], three[1]}, 6, dir));
  ASSERT_TRUE(gang.ok()) << gang.status();
  std::ostringstream out2;
  auto second = TrainGang(*gang, out2, nullptr);
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_TRUE(second->ok());
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(second->tasks[i]->resumed_from_step, 3);
    ExpectLosses(second->tasks[i]->losses, alone[i].losses, 3);
  }
}

// Tasks of one gang reading one text corpus: each tokenizes it on its own
// thread of the one process, and each trains as it does alone (a shared
// temporary token file once failed one task and fed another a torn file).
TEST(GangTest, TasksOnOneTextCorpusEachTrainAsAlone) {
  at::set_num_threads(1);
  TempDir dir;
  const std::string corpus = dir.Sub("corpus.txt");
  {
    std::ofstream txt(corpus);
    for (int i = 0; i < 4000; ++i) txt << "sentence " << i << " of a small text corpus.\n";
  }
  auto gpt = [&](const std::string& name, const std::string& lr) {
    return std::vector<std::string>{
        "--task=" + name,  "--model=gpt", "--layers=1",       "--hidden=16",           "--heads=2",
        "--seq=16",        "--vocab=256", "--data=text",      "--data-path=" + corpus, "--seed=0",
        "--batch=4",       "--steps=4",   "--report-every=1", "--optimizer=adamw",     "--lr=" + lr,
        "--decay=constant"};
  };
  const std::vector<std::pair<std::string, std::string>> members = {
      {"a", "1e-3"}, {"b", "3e-3"}, {"c", "1e-2"}, {"d", "3e-2"}};
  const std::string budget = "--spill-budget-bytes=" + std::to_string(int64_t{64} << 20);
  std::vector<std::string> argv = {budget};
  std::vector<std::vector<double>> alone;
  for (const auto& [name, lr] : members) {
    argv.emplace_back("--");
    for (auto& a : gpt(name, lr)) argv.push_back(a);
    std::vector<std::string> one = gpt(name, lr);
    one.emplace_back("--template=spill");
    one.push_back(budget);
    auto task = ParseTaskFlags(one);
    ASSERT_TRUE(task.ok()) << task.status();
    std::ostringstream sink;
    auto r = Train(*task, nullptr, sink, nullptr);
    ASSERT_TRUE(r.ok()) << r.status();
    alone.push_back(r->losses);
  }
  auto gang = ParseGangFlags(argv);
  ASSERT_TRUE(gang.ok()) << gang.status();
  std::ostringstream out;
  auto r = TrainGang(*gang, out, nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  for (size_t i = 0; i < members.size(); ++i) {
    ASSERT_TRUE(r->tasks[i].ok()) << members[i].first << ": " << r->tasks[i].status();
    ASSERT_EQ(r->tasks[i]->losses.size(), alone[i].size()) << members[i].first;
    for (size_t s = 0; s < alone[i].size(); ++s)
      EXPECT_DOUBLE_EQ(r->tasks[i]->losses[s], alone[i][s]) << members[i].first << " step " << s;
  }
}

TEST(GangTest, FailedTaskLeavesTheOtherRunning) {
  at::set_num_threads(1);
  TempDir dir;
  std::vector<std::string> argv = GangArgv(4, dir);
  // Task b's widest layer does not fit a third of the budget: it fails joining.
  argv.push_back("--mlp-hidden=1024");
  auto gang = ParseGangFlags(argv);
  ASSERT_TRUE(gang.ok()) << gang.status();
  std::ostringstream out;
  auto r = TrainGang(*gang, out, nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->ok());
  ASSERT_TRUE(r->tasks[0].ok()) << r->tasks[0].status();
  EXPECT_EQ(r->tasks[0]->status, "completed");
  EXPECT_EQ(r->tasks[0]->step, 4);
  EXPECT_FALSE(r->tasks[1].ok());
}

// Calls `on_line` with each whole line written through it, on the writer's
// thread (a gang writes each task's lines from that task's thread).
class LineWatch : public std::streambuf {
 public:
  explicit LineWatch(std::function<void(const std::string&)> on_line)
      : on_line_(std::move(on_line)) {}
  std::string text;

 protected:
  int_type overflow(int_type c) override {
    if (c == traits_type::eof()) return traits_type::not_eof(c);
    text.push_back(static_cast<char>(c));
    line_.push_back(static_cast<char>(c));
    if (c == '\n') {
      on_line_(line_);
      line_.clear();
    }
    return c;
  }

 private:
  std::function<void(const std::string&)> on_line_;
  std::string line_;
};

// One task of a running gang stopped alone (after its step 2): it checkpoints
// and ends preempted, the other runs on to its last step equal to itself
// alone, and the stopped one resumes alone from its checkpoint, equal again.
TEST(GangTest, OneTaskStoppedAloneCheckpointsAndTheOtherRunsOn) {
  at::set_num_threads(1);
  TempDir dir;
  const TrainResult alone_a = Alone("a", 64, 3, dir);
  const TrainResult alone_b = Alone("b", 96, 5, dir);
  auto gang = ParseGangFlags(GangArgv(6, dir));
  ASSERT_TRUE(gang.ok()) << gang.status();
  GangStops stops({"a", "b"});
  LineWatch watch([&](const std::string& line) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.value("task", "") == "b" && j.value("event", "") == "progress" &&
        j.value("step", 0) == 2) {
      EXPECT_TRUE(stops.Request("b"));
    }
  });
  std::ostream out(&watch);
  auto r = TrainGang(*gang, out, nullptr, &stops);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->ok()) << watch.text;
  ASSERT_TRUE(r->tasks[0].ok() && r->tasks[1].ok());
  EXPECT_EQ(r->tasks[0]->status, "completed");
  EXPECT_EQ(r->tasks[0]->step, 6);
  ASSERT_EQ(r->tasks[0]->losses.size(), 6u);
  for (size_t i = 0; i < 6; ++i)
    EXPECT_NEAR(r->tasks[0]->losses[i], alone_a.losses[i], 1e-5) << "a, step " << i;
  EXPECT_EQ(r->tasks[1]->status, "preempted");
  EXPECT_EQ(r->tasks[1]->step, 2);
  auto steps = checkpoint::CheckpointStore(dir.Sub("b"), 2).CommittedSteps();
  ASSERT_TRUE(steps.ok()) << steps.status();
  ASSERT_FALSE(steps->empty());
  EXPECT_EQ(steps->back(), 2);
  // b's done line says preempted.
  std::string b_done;
  std::istringstream lines(watch.text);
  for (std::string line; std::getline(lines, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.value("task", "") == "b" && j.value("event", "") == "done")
      b_done = j.value("status", "");
  }
  EXPECT_EQ(b_done, "preempted") << watch.text;
  const TrainResult b = AloneIn("b", 96, 5, dir.Sub("b"));
  EXPECT_EQ(b.resumed_from_step, 2);
  ASSERT_EQ(b.losses.size(), 4u);
  for (size_t i = 0; i < 4; ++i)
    EXPECT_NEAR(b.losses[i], alone_b.losses[2 + i], 1e-5 * std::max(1.0, alone_b.losses[2 + i]))
        << "b, step " << 2 + i;
}

// The --stop-file: a line naming a task stops it (here written before the
// gang starts: it stops before its first step), a line naming none is said
// and ignored.
TEST(GangTest, TheStopFileStopsTheTaskItNames) {
  at::set_num_threads(1);
  TempDir dir;
  const std::string stop_file = dir.Sub("stop");
  std::ofstream(stop_file) << "nobody\nb\n";
  std::vector<std::string> argv = GangArgv(4, dir);
  argv.insert(argv.begin(), "--stop-file=" + stop_file);
  auto gang = ParseGangFlags(argv);
  ASSERT_TRUE(gang.ok()) << gang.status();
  EXPECT_EQ(gang->stop_file, stop_file);
  std::ostringstream out;
  auto r = TrainGang(*gang, out, nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->tasks[0].ok() && r->tasks[1].ok()) << out.str();
  EXPECT_EQ(r->tasks[0]->status, "completed");
  EXPECT_EQ(r->tasks[0]->step, 4);
  EXPECT_EQ(r->tasks[1]->status, "preempted");
  EXPECT_EQ(r->tasks[1]->step, 0);
  EXPECT_NE(out.str().find(R"({"event":"stop_ignored","name":"nobody")"), std::string::npos)
      << out.str();
}

TEST(GangArgsTest, RoundTripsWithEachTaskAsAlone) {
  TempDir dir;
  std::vector<std::string> argv = GangArgv(6, dir);
  argv.insert(argv.begin(), "--stop-file=" + dir.Sub("stop"));
  auto parsed = contract::ParseGangArgs(argv);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->tasks.size(), 2u);
  EXPECT_EQ(parsed->stop_file, dir.Sub("stop"));
  EXPECT_EQ(contract::ParseGangArgs(contract::ToGangArgs(*parsed)).value(), *parsed);
  // A task's part of the command line is what `train` would be given alone.
  auto alone = contract::ParseWorkerArgs(MlpTask("a", 64, 3, 6, dir.Sub("a")));
  ASSERT_TRUE(alone.ok());
  const auto written = contract::ToGangArgs(*parsed);
  const auto task_a = contract::ToArgs(*alone);
  ASSERT_GE(written.size(), 3 + task_a.size());
  EXPECT_EQ(std::vector<std::string>(written.begin() + 3, written.begin() + 3 + task_a.size()),
            task_a);
}

TEST(GangArgsTest, RefusesBadGangsNamingTheFlag) {
  const std::vector<std::string> a = {"--task=a", "--model=mlp"};
  const std::vector<std::string> b = {"--task=b", "--model=mlp"};
  auto gang = [&](std::vector<std::string> head, std::vector<std::string> x,
                  std::vector<std::string> y) {
    head.emplace_back("--");
    head.insert(head.end(), x.begin(), x.end());
    head.emplace_back("--");
    head.insert(head.end(), y.begin(), y.end());
    return contract::ParseGangArgs(head);
  };
  auto error = [](const StatusOr<contract::GangArgs>& r) {
    return r.ok() ? std::string("ok") : r.status().ToString();
  };
  const std::vector<std::string> budget = {"--spill-budget-bytes=4096"};
  EXPECT_TRUE(gang(budget, a, b).ok());
  EXPECT_NE(error(gang({"--spill-budget-bytes=4096", "--stop-file="}, a, b)).find("--stop-file"),
            std::string::npos);
  EXPECT_NE(error(gang({}, a, b)).find("--spill-budget-bytes"), std::string::npos);
  EXPECT_NE(error(gang({"--spill-budget-bytes=4096", "--order=x"}, a, b)).find("--order"),
            std::string::npos);
  EXPECT_NE(
      error(gang({"--spill-budget-bytes=4096", "--interleave-order=x"}, a, b)).find("round_robin"),
      std::string::npos);
  EXPECT_NE(error(gang(budget, a, a)).find("two tasks are named --task a"), std::string::npos);
  EXPECT_NE(error(gang(budget, a, {"--model=mlp"})).find("gang task 2 has no --task"),
            std::string::npos);
  auto with = [](std::vector<std::string> t, const std::string& flag) {
    t.push_back(flag);
    return t;
  };
  EXPECT_NE(error(gang(budget, a, with(b, "--template=ddp"))).find("--template spill"),
            std::string::npos);
  EXPECT_NE(error(gang(budget, a, with(b, "--device=cpu"))).find("gang's --device"),
            std::string::npos);
  EXPECT_NE(error(gang(budget, a, with(b, "--spill-budget-bytes=9"))).find("share the gang's"),
            std::string::npos);
  EXPECT_NE(error(gang(budget, a, with(b, "--metrics-address=:9100"))).find("no /metrics"),
            std::string::npos);
  EXPECT_NE(error(gang(budget, a, with(b, "--layout=dp=2,tp=1,pp=1"))).find("dp=1"),
            std::string::npos);
  EXPECT_TRUE(gang(budget, a, with(b, "--layout=dp=1,tp=1,pp=1")).ok());
  EXPECT_NE(error(gang(budget, with(a, "--checkpoint-dir=/c"), with(b, "--checkpoint-dir=/c")))
                .find("give each its own"),
            std::string::npos);
  EXPECT_NE(error(gang(budget, a, with(b, "--bogus=1"))).find("gang task 2"), std::string::npos);
  std::vector<std::string> one = budget;
  one.emplace_back("--");
  one.insert(one.end(), a.begin(), a.end());
  EXPECT_NE(error(contract::ParseGangArgs(one)).find("at least two tasks"), std::string::npos);
}

}  // namespace
}  // namespace orrery::train
