// Orrery's GPT-2, Llama and Qwen2 against Hugging Face transformers (issue 19):
// tiny random models made and saved by transformers (hf_reference.py, run with
// the pinned interpreter scripts/reference-venv prints; nothing downloaded),
// loaded by Orrery from their safetensors, and checked for
//  - logits equal to transformers' forward within 1e-4, whole and under every
//    template at 1, 2 and 4 ranks (Strategy::Forward), a tensor-parallel rank
//    reading only its slice of the files;
//  - 20 steps of AdamW giving the losses of the same loop in PyTorch within
//    1e-3 relative under every template at 1, 2 and 4 ranks;
//  - an export that transformers loads and that gives Orrery's logits;
//  - errors, not crashes, for weights that do not match config.json.
// The Llama model is saved in bf16 and sharded (an index and five files).
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "tests/worker/dist/run_ranks.h"
#include "worker/model/model.h"
#include "worker/model/pretrained.h"
#include "worker/parallel/strategy.h"

namespace orrery {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr int kSeq = 16;

// The pinned interpreter scripts/reference-venv names (it honours
// ORRERY_REFERENCE_VENV), asked once.
std::string Python() {
  static const std::string python = [] {
    std::string out;
    FILE* p =
        popen((std::string(ORRERY_SOURCE_DIR) + "/scripts/reference-venv --python").c_str(), "r");
    if (p == nullptr) return out;
    char buf[512];
    while (fgets(buf, sizeof(buf), p) != nullptr) out += buf;
    pclose(p);
    while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
    return out;
  }();
  return python;
}

std::string Script() {
  return std::string(ORRERY_SOURCE_DIR) + "/tests/worker/model/hf_reference.py";
}

// Runs `command`, its output to `out` (or nowhere); returns its exit status.
int Shell(const std::string& command, const std::string& out = "/dev/null") {
  return std::system((command + " >" + out + " 2>&1").c_str());  // NOLINT(cert-env33-c)
}

json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

struct Family {
  std::string dir;
  json ref;
  model::ModelConfig config;
};

class HfReferenceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new testing_worker::TempDir();
    families_ = new std::map<std::string, Family>();
    if (!fs::exists(Python())) return;
    for (const char* name : {"gpt2", "llama", "qwen2"}) {
      Family f;
      f.dir = root_->path() + "/" + name;
      std::string extra =
          std::string(name) == "llama" ? " --dtype bfloat16 --shard-bytes 60000" : "";
      if (Shell(Python() + " " + Script() + " make " + f.dir + " --family " + name + extra) != 0)
        continue;
      f.ref = ReadJson(f.dir + "/reference.json");
      f.config.kind = "gpt";
      f.config.pretrained = f.dir;
      auto c = model::ConfigFromPretrained(f.dir, kSeq);
      if (!c.ok()) continue;
      f.config.gpt = *c;
      (*families_)[name] = f;
    }
  }
  static void TearDownTestSuite() {
    delete families_;
    delete root_;
  }

  void SetUp() override {
    ASSERT_TRUE(fs::exists(Python()))
        << "no reference Python at " << Python() << ": run scripts/reference-venv";
    ASSERT_EQ(families_->size(), 3u) << "hf_reference.py failed to make the models; run "
                                     << Python() << " " << Script() << " make /tmp/x --family gpt2";
    at::set_num_threads(1);
  }

  static const Family& Get(const std::string& name) { return families_->at(name); }

  static at::Tensor Ids(const json& ref) {
    std::vector<int64_t> flat;
    for (const auto& row : ref["input_ids"])
      for (const auto& v : row) flat.push_back(v.get<int64_t>());
    return torch::tensor(flat, at::kLong).view({static_cast<int64_t>(ref["input_ids"].size()), -1});
  }
  static at::Tensor Logits(const json& j, const at::Tensor& ids, int64_t vocab) {
    std::vector<float> flat = j["logits"].get<std::vector<float>>();
    return torch::tensor(flat).view({ids.size(0), ids.size(1), vocab});
  }
  // max |a - b| over max(1, max |b|).
  static double Diff(const at::Tensor& a, const at::Tensor& b) {
    double scale = std::max(1.0, b.abs().max().item<double>());
    return (a - b).abs().max().item<double>() / scale;
  }

  static testing_worker::TempDir* root_;
  static std::map<std::string, Family>* families_;
};

testing_worker::TempDir* HfReferenceTest::root_ = nullptr;
std::map<std::string, Family>* HfReferenceTest::families_ = nullptr;

TEST_F(HfReferenceTest, ConfigJsonSetsTheArchitecture) {
  const model::GptConfig& g = Get("gpt2").config.gpt;
  EXPECT_EQ(g.family, "gpt2");
  EXPECT_TRUE(g.tie_embeddings);
  EXPECT_EQ(g.activation, "gelu_tanh");
  EXPECT_EQ(g.MaxPositions(), 32);
  const model::GptConfig& l = Get("llama").config.gpt;
  EXPECT_EQ(l.family, "llama");
  EXPECT_EQ(l.KvHeads(), 4);
  EXPECT_EQ(l.heads, 8);
  EXPECT_EQ(l.rope.type, "llama3");
  EXPECT_FALSE(l.tie_embeddings);
  EXPECT_FALSE(l.qkv_bias);
  const model::GptConfig& q = Get("qwen2").config.gpt;
  EXPECT_TRUE(q.qkv_bias);
  EXPECT_FALSE(q.out_bias);
  EXPECT_TRUE(q.tie_embeddings);
  EXPECT_EQ(q.hf_model_type, "qwen2");
}

TEST_F(HfReferenceTest, LogitsEqualTransformers) {
  for (const char* name : {"gpt2", "llama", "qwen2"}) {
    const Family& f = Get(name);
    auto m = model::BuildModel(f.config);
    ASSERT_TRUE(m.ok()) << name << ": " << m.status();
    at::Tensor ids = Ids(f.ref);
    torch::NoGradGuard no_grad;
    at::Tensor logits = m->Forward(ids);
    at::Tensor want = Logits(f.ref, ids, f.config.gpt.vocab);
    EXPECT_LE(Diff(logits, want), 1e-4) << name;
  }
}

// Each tensor-parallel rank reads only its slice and the ranks together give
// the whole model's logits.
TEST_F(HfReferenceTest, TensorParallelRanksReadTheirSliceAndGiveTheSameLogits) {
  for (const char* name : {"gpt2", "llama", "qwen2"}) {
    const Family& f = Get(name);
    at::Tensor ids = Ids(f.ref);
    at::Tensor want = Logits(f.ref, ids, f.config.gpt.vocab);
    for (int tp : {2, 4}) {
      std::vector<double> diffs(static_cast<size_t>(tp), 1.0);
      auto statuses = testing_worker::RunRanks(tp, [&](int rank, dist::Rendezvous* rdv) -> Status {
        std::vector<int> all;
        for (int r = 0; r < tp; ++r) all.push_back(r);
        ORRERY_ASSIGN_OR_RETURN(auto comm, rdv->NewGroup("tp", all));
        model::Model m;
        ORRERY_RETURN_IF_ERROR(model::ForEachLayer(
            f.config,
            [&](std::shared_ptr<model::Layer> l) {
              m.layers.push_back(std::move(l));
              return OkStatus();
            },
            model::TensorParallelSlice{rank, tp, comm.get()}));
        torch::NoGradGuard no_grad;
        diffs[static_cast<size_t>(rank)] = Diff(m.Forward(ids), want);
        return OkStatus();
      });
      for (int r = 0; r < tp; ++r) {
        ASSERT_TRUE(statuses[static_cast<size_t>(r)].ok()) << statuses[static_cast<size_t>(r)];
        EXPECT_LE(diffs[static_cast<size_t>(r)], 1e-4) << name << " tp=" << tp << " rank " << r;
      }
    }
  }
}

TEST_F(HfReferenceTest, ATensorParallelRankReadsOnlyItsBytes) {
  const Family& f = Get("qwen2");
  const model::GptConfig& c = f.config.gpt;
  auto whole = model::PretrainedWeights::Open(f.dir, c);
  auto part = model::PretrainedWeights::Open(f.dir, c);
  ASSERT_TRUE(whole.ok() && part.ok());
  int64_t expected = 0;  // float32 files: 4 bytes an element of this rank's slice
  for (size_t index = 0; index < static_cast<size_t>(c.layers) + 2; ++index) {
    auto all = (*whole)->ReadLayer(index, {});
    auto mine = (*part)->ReadLayer(index, {1, 4, nullptr});
    ASSERT_TRUE(all.ok() && mine.ok()) << all.status() << mine.status();
    for (const auto& [n, t] : *mine) {
      // The tied head is read from the embedding once more.
      expected += t.numel() * 4;
    }
  }
  EXPECT_EQ((*part)->bytes_read(), static_cast<uint64_t>(expected));
  EXPECT_LT((*part)->bytes_read(), (*whole)->bytes_read() * 7 / 10);
}

struct Layout {
  std::string name;
  int world;
  dist::Layout layout{1, 1, 1};
};

const std::vector<Layout>& AllLayouts() {
  static const std::vector<Layout> layouts = {{"single", 1},
                                              {"ddp", 2},
                                              {"fsdp", 2},
                                              {"fsdp", 4},
                                              {"tensor", 2},
                                              {"tensor", 4},
                                              {"pipeline", 2},
                                              {"pipeline", 4},
                                              {"spill", 1},
                                              {"spill", 2},
                                              {"hybrid", 4, {2, 2, 1}},
                                              {"hybrid", 4, {1, 2, 2}},
                                              {"hybrid", 4, {2, 1, 2}}};
  return layouts;
}

// Trains `config` on the reference batches under each layout and checks the
// losses against `want` within 1e-3 relative.
void ExpectLosses(const std::string& what_model, const model::ModelConfig& config, const json& ref,
                  const std::vector<double>& want, const std::vector<Layout>& layouts,
                  const model::NamedTensors* start = nullptr, const std::string& precision = "fp32",
                  double tolerance = 1e-3) {
  std::vector<model::Batch> batches;
  for (const auto& b : ref["batches"]) {
    std::vector<int64_t> flat;
    for (const auto& row : b)
      for (const auto& v : row) flat.push_back(v.get<int64_t>());
    at::Tensor t = torch::tensor(flat, at::kLong).view({static_cast<int64_t>(b.size()), -1});
    batches.push_back({t.narrow(1, 0, kSeq).contiguous(), t.narrow(1, 1, kSeq).contiguous()});
  }
  ASSERT_EQ(batches.size(), want.size());
  parallel::OptimizerConfig oc;
  oc.kind = "adamw";
  oc.lr = ref["lr"].get<double>();
  oc.weight_decay = ref["weight_decay"].get<double>();
  for (const Layout& l : layouts) {
    parallel::StrategyConfig sc;
    sc.name = l.name;
    sc.layout = l.layout;
    sc.spill_budget_bytes = 1 << 20;  // a shard a block or so: several shards
    sc.precision = precision;
    if (l.layout.pp > 1 || l.name == "pipeline") sc.micro_batches = 4;
    std::vector<std::vector<double>> losses(static_cast<size_t>(l.world));
    auto statuses =
        testing_worker::RunRanks(l.world, [&](int rank, dist::Rendezvous* rdv) -> Status {
          ORRERY_ASSIGN_OR_RETURN(
              auto s, parallel::MakeStrategy(config, sc, oc, l.world == 1 ? nullptr : rdv));
          if (start != nullptr) ORRERY_RETURN_IF_ERROR(s->LoadFullParameters(*start));
          for (const auto& b : batches) {
            ORRERY_ASSIGN_OR_RETURN(double loss, s->Step(b));
            losses[static_cast<size_t>(rank)].push_back(loss);
          }
          return OkStatus();
        });
    const std::string what = what_model + " " + l.name + " x" + std::to_string(l.world) + " " +
                             dist::LayoutToString(l.layout);
    for (int r = 0; r < l.world; ++r) {
      ASSERT_TRUE(statuses[static_cast<size_t>(r)].ok())
          << what << " rank " << r << ": " << statuses[static_cast<size_t>(r)];
    }
    const std::vector<double>& got = losses[0];
    ASSERT_EQ(got.size(), want.size()) << what;
    double worst = 0;
    for (size_t i = 0; i < want.size(); ++i)
      worst = std::max(worst, std::abs(got[i] - want[i]) / std::abs(want[i]));
    EXPECT_LE(worst, tolerance) << what << ": first loss " << got[0] << " vs " << want[0]
                                << ", last " << got.back() << " vs " << want.back();
    // Training did something (the losses are not all the first one).
    EXPECT_NE(got.front(), got.back()) << what;
  }
}

// Every template's own forward (Strategy::Forward: tensor slices, pipeline
// stages, gathered fsdp units, spilled shards) gives transformers' logits on
// every rank, at 1, 2 and 4 ranks, reading the weights as that layout does.
TEST_F(HfReferenceTest, LogitsEqualTransformersUnderEveryTemplate) {
  // A forward is cheap: every template at 4 ranks too (training runs the
  // shorter list).
  std::vector<Layout> layouts = AllLayouts();
  layouts.push_back({"ddp", 4});
  layouts.push_back({"spill", 4});
  for (const char* name : {"gpt2", "llama", "qwen2"}) {
    const Family& f = Get(name);
    at::Tensor ids = Ids(f.ref);
    at::Tensor want = Logits(f.ref, ids, f.config.gpt.vocab);
    for (const Layout& l : layouts) {
      parallel::StrategyConfig sc;
      sc.name = l.name;
      sc.layout = l.layout;
      sc.spill_budget_bytes = 1 << 20;
      std::vector<double> diffs(static_cast<size_t>(l.world), 1.0);
      auto statuses =
          testing_worker::RunRanks(l.world, [&](int rank, dist::Rendezvous* rdv) -> Status {
            ORRERY_ASSIGN_OR_RETURN(
                auto s, parallel::MakeStrategy(f.config, sc, {}, l.world == 1 ? nullptr : rdv));
            ORRERY_ASSIGN_OR_RETURN(at::Tensor logits, s->Forward(ids));
            diffs[static_cast<size_t>(rank)] = Diff(logits, want);
            return OkStatus();
          });
      const std::string what = std::string(name) + " " + l.name + " x" + std::to_string(l.world) +
                               " " + dist::LayoutToString(l.layout);
      for (int r = 0; r < l.world; ++r) {
        ASSERT_TRUE(statuses[static_cast<size_t>(r)].ok())
            << what << " rank " << r << ": " << statuses[static_cast<size_t>(r)];
        EXPECT_LE(diffs[static_cast<size_t>(r)], 1e-4) << what << " rank " << r;
      }
    }
  }
}

TEST_F(HfReferenceTest, FrozenLayersLossesEqualPyTorchUnderEveryTemplate) {
  for (const char* name : {"gpt2", "llama", "qwen2"}) {
    const Family& f = Get(name);
    const std::string out = f.dir + "/frozen.json";
    ASSERT_EQ(Shell(Python() + " " + Script() + " train " + f.dir + " " + out +
                    " --freeze-blocks 2 --freeze-embeddings"),
              0);
    model::ModelConfig config = f.config;
    config.finetune.freeze_blocks = 2;
    config.finetune.freeze_embeddings = true;
    ExpectLosses(std::string(name) + " frozen-2", config, f.ref,
                 ReadJson(out)["losses"].get<std::vector<double>>(), AllLayouts());
  }
}

TEST_F(HfReferenceTest, LoraLossesEqualPeftUnderEveryTemplate) {
  for (const char* name : {"gpt2", "llama", "qwen2"}) {
    const Family& f = Get(name);
    model::ModelConfig config = f.config;
    config.finetune.lora_rank = 4;
    config.finetune.lora_alpha = 8;
    if (std::string(name) != "gpt2") {
      config.finetune.lora_targets = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                      "gate_proj", "up_proj", "down_proj"};
    } else {
      config.finetune.lora_targets = {"c_attn", "c_proj", "c_fc"};
    }
    // Orrery's initial adapters, exported in PEFT's layout, start PEFT's loop.
    auto s = parallel::MakeStrategy(config, {}, {}, nullptr);
    ASSERT_TRUE(s.ok()) << s.status();
    auto initial = (*s)->GatherFullParameters();
    ASSERT_TRUE(initial.ok());
    // B starts at zero; give it values so the first steps exercise the whole adapter.
    for (auto& [n, t] : *initial) {
      if (n.find(".lora_b") != std::string::npos) t.normal_(0.0, 0.05);
    }
    const std::string adapter = f.dir + "-adapter";
    model::ExportOptions options;
    options.source_dir = f.dir;
    Status written = model::ExportLoraAdapter(config, *initial, adapter, options);
    ASSERT_TRUE(written.ok()) << written;
    const std::string out = f.dir + "/lora.json";
    ASSERT_EQ(
        Shell(Python() + " " + Script() + " train " + f.dir + " " + out + " --adapter " + adapter),
        0)
        << "PEFT could not load Orrery's adapter in " << adapter;
    // Orrery starts from the same adapters.
    std::vector<double> want = ReadJson(out)["losses"].get<std::vector<double>>();
    ExpectLosses(std::string(name) + " lora", config, f.ref, want, AllLayouts(), &*initial);
  }
}

// bf16 autocast with float32 master weights: the losses of PyTorch's
// torch.autocast loop (whose bf16 rounding of each matmul Orrery shares, up to
// the order of accumulation), and not the float32 ones.
TEST_F(HfReferenceTest, Bf16AutocastLossesFollowPyTorchAutocast) {
  for (const char* name : {"gpt2", "llama"}) {
    const Family& f = Get(name);
    const std::string out = f.dir + "/bf16.json";
    ASSERT_EQ(Shell(Python() + " " + Script() + " train " + f.dir + " " + out + " --bf16"), 0);
    std::vector<double> want = ReadJson(out)["losses"].get<std::vector<double>>();
    ExpectLosses(std::string(name) + " bf16", f.config, f.ref, want,
                 {{"single", 1}, {"fsdp", 2}, {"hybrid", 4, {1, 2, 2}}}, nullptr, "bf16", 1e-2);
    // bf16 is really in use: its first loss is not float32's.
    parallel::StrategyConfig sc;
    sc.precision = "bf16";
    auto s = parallel::MakeStrategy(f.config, sc, {}, nullptr);
    ASSERT_TRUE(s.ok()) << s.status();
    at::Tensor t = Ids(f.ref);
    auto loss = (*s)->Step({t, t});
    ASSERT_TRUE(loss.ok());
    sc.precision = "fp32";
    auto s32 = parallel::MakeStrategy(f.config, sc, {}, nullptr);
    auto loss32 = (*s32)->Step({t, t});
    ASSERT_TRUE(loss32.ok());
    EXPECT_NE(*loss, *loss32) << name;
    EXPECT_LE(std::abs(*loss - *loss32), 1e-2 * std::abs(*loss32)) << name;
  }
}

TEST_F(HfReferenceTest, FineTuningLossesEqualPyTorchUnderEveryTemplate) {
  for (const char* name : {"gpt2", "llama", "qwen2"}) {
    const Family& f = Get(name);
    ExpectLosses(name, f.config, f.ref, f.ref["losses"].get<std::vector<double>>(), AllLayouts());
  }
}

// Fine-tune, export, and load the export in transformers: its logits are
// Orrery's for the trained weights, and the export holds exactly them.
TEST_F(HfReferenceTest, ExportLoadsInTransformersWithOrrerysLogits) {
  for (const char* name : {"gpt2", "llama", "qwen2"}) {
    const Family& f = Get(name);
    parallel::StrategyConfig sc;
    parallel::OptimizerConfig oc;
    oc.kind = "adamw";
    oc.lr = 1e-2;
    auto s = parallel::MakeStrategy(f.config, sc, oc, nullptr);
    ASSERT_TRUE(s.ok()) << s.status();
    at::Tensor ids = Ids(f.ref);
    for (int step = 0; step < 3; ++step) {
      auto loss = (*s)->Step(
          {ids.narrow(1, 0, kSeq - 1).contiguous(), ids.narrow(1, 1, kSeq - 1).contiguous()});
      ASSERT_TRUE(loss.ok()) << loss.status();
    }
    auto trained = (*s)->GatherFullParameters();
    ASSERT_TRUE(trained.ok());
    const std::string out = root_->path() + "/export-" + name;
    model::ExportOptions options;
    options.source_dir = f.dir;
    Status exported = model::ExportPretrained(f.config.gpt, *trained, out, options);
    ASSERT_TRUE(exported.ok()) << exported;
    EXPECT_TRUE(fs::exists(out + "/generation_config.json"));

    // Orrery reading its own export gets exactly the trained weights.
    model::ModelConfig again = f.config;
    again.pretrained = out;
    auto reloaded = model::BuildModel(again);
    ASSERT_TRUE(reloaded.ok()) << reloaded.status();
    auto diff = model::MaxRelativeDifference(reloaded->NamedParameters(), *trained);
    ASSERT_TRUE(diff.ok()) << diff.status();
    EXPECT_EQ(*diff, 0.0) << name;

    // transformers' logits of the export equal Orrery's.
    const std::string ids_path = out + "/ids.json", logits_path = out + "/logits.json";
    {
      std::ofstream o(ids_path);
      o << json{{"input_ids", f.ref["input_ids"]}}.dump();
    }
    ASSERT_EQ(
        Shell(Python() + " " + Script() + " logits " + out + " " + ids_path + " " + logits_path), 0)
        << "transformers could not load the export in " << out;
    torch::NoGradGuard no_grad;
    at::Tensor mine = reloaded->Forward(ids);
    at::Tensor theirs = Logits(ReadJson(logits_path), ids, f.config.gpt.vocab);
    EXPECT_LE(Diff(mine, theirs), 1e-4) << name;
  }
}

// The product's path end to end: `orrery-worker train` on text with the
// model's own tokenizer.json and a LoRA adapter, exported in PEFT's layout and
// merged; `orrery-worker export` gives the same adapter from the checkpoint;
// transformers + PEFT over the base equals the merged model.
TEST_F(HfReferenceTest, WorkerFineTunesTextWithTheModelsTokenizerAndExports) {
  const std::string dir = root_->path() + "/gpt2-tok";
  ASSERT_EQ(Shell(Python() + " " + Script() + " make " + dir +
                  " --family gpt2 --vocab 320 --tokenizer --steps 1"),
            0);
  const std::string worker = std::string(ORRERY_BINARY_DIR) + "/bin/orrery-worker";
  const std::string ck = root_->path() + "/tok-ck", out = root_->path() + "/tok-out",
                    again = root_->path() + "/tok-again";
  const std::string model = " --model gpt --pretrained " + dir +
                            " --seq 16 --lora-rank 4 --lora-alpha 8 --lora-targets c_attn,c_fc";
  const std::string log = root_->path() + "/tok-train.log";
  ASSERT_EQ(Shell("env -u RANK -u WORLD_SIZE " + worker + " train" + model +
                      " --data text --data-path " + dir + "/corpus.txt --batch 4 --steps 3" +
                      " --optimizer adamw --lr 1e-3 --checkpoint-dir " + ck + " --export-dir " +
                      out + " --export-merged",
                  log),
            0)
      << "see " << log;
  std::ifstream events(log);
  json done;
  bool exported = false;
  for (std::string line; std::getline(events, line);) {
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded()) continue;
    if (j.value("event", "") == "export") exported = true;
    if (j.value("event", "") == "done") done = j;
  }
  EXPECT_TRUE(exported);
  EXPECT_EQ(done.value("export", ""), out);
  EXPECT_TRUE(fs::exists(out + "/adapter_config.json"));
  EXPECT_TRUE(fs::exists(out + "/adapter_model.safetensors"));
  EXPECT_TRUE(fs::exists(out + "/merged/config.json"));
  EXPECT_TRUE(fs::exists(out + "/merged/tokenizer.json"));

  // The worker tokenized the text once, with exactly the tokenizers library's ids.
  std::vector<int32_t> want = ReadJson(dir + "/corpus_ids.json").get<std::vector<int32_t>>();
  std::vector<std::string> cached;
  for (const auto& e : fs::directory_iterator(ck + "/tokens")) cached.push_back(e.path());
  ASSERT_EQ(cached.size(), 1u);
  std::ifstream tokens(cached[0], std::ios::binary);
  std::vector<uint16_t> got(want.size() + 1);
  tokens.read(reinterpret_cast<char*>(got.data()),  // NOLINT
              static_cast<std::streamsize>(got.size() * sizeof(uint16_t)));
  ASSERT_EQ(tokens.gcount(), static_cast<std::streamsize>(want.size() * sizeof(uint16_t)));
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << "token " << i;

  // From the checkpoint, in another process: the same adapter.
  ASSERT_EQ(Shell("env -u RANK -u WORLD_SIZE " + worker + " export" + model + " --checkpoint-dir " +
                  ck + " --export-dir " + again),
            0);
  for (const char* f : {"/adapter_model.safetensors", "/adapter_config.json"}) {
    std::ifstream a(out + f, std::ios::binary), b(again + f, std::ios::binary);
    std::stringstream sa, sb;
    sa << a.rdbuf();
    sb << b.rdbuf();
    EXPECT_EQ(sa.str(), sb.str()) << f;
  }
  // PEFT's adapter over the base model is the merged model.
  const std::string ids = root_->path() + "/tok-ids.json";
  {
    std::ofstream o(ids);
    o << json{{"input_ids", {{5, 17, 200, 3, 99, 310}, {1, 2, 3, 4, 5, 6}}}}.dump();
  }
  ASSERT_EQ(Shell(Python() + " " + Script() + " logits " + dir + " " + ids + " " + root_->path() +
                  "/peft.json --adapter " + out),
            0)
      << "PEFT could not load " << out;
  ASSERT_EQ(Shell(Python() + " " + Script() + " logits " + out + "/merged " + ids + " " +
                  root_->path() + "/merged.json"),
            0);
  at::Tensor shape = torch::zeros({2, 6}, at::kLong);
  at::Tensor peft = Logits(ReadJson(root_->path() + "/peft.json"), shape, 320);
  at::Tensor merged = Logits(ReadJson(root_->path() + "/merged.json"), shape, 320);
  EXPECT_LE(Diff(merged, peft), 1e-4);
}

TEST_F(HfReferenceTest, WeightsThatDoNotMatchConfigAreErrorsNamingTheTensor) {
  const Family& f = Get("gpt2");
  model::ModelConfig bigger = f.config;
  bigger.gpt.layers = 4;  // config says 4, the files hold 3
  auto m = model::BuildModel(bigger);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("transformer.h.3."), std::string::npos) << m.status();
  model::ModelConfig wider = f.config;
  wider.gpt.vocab = 200;
  m = model::BuildModel(wider);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("wte.weight"), std::string::npos) << m.status();
  EXPECT_NE(m.status().message().find("config.json"), std::string::npos) << m.status();

  auto bad = model::ParseHuggingFaceConfig(R"({"model_type": "bert", "hidden_size": 8})",
                                           "x/config.json", 16);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("model_type 'bert'"), std::string::npos) << bad.status();
  bad = model::ParseHuggingFaceConfig(R"({"model_type": "llama", "hidden_size": 8})",
                                      "x/config.json", 16);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("num_hidden_layers"), std::string::npos) << bad.status();
  bad = model::ParseHuggingFaceConfig("{not json", "x/config.json", 16);
  EXPECT_FALSE(bad.ok());
  bad = model::ParseHuggingFaceConfig(
      R"({"model_type":"llama","num_hidden_layers":1,"hidden_size":8,"num_attention_heads":2,
          "vocab_size":10,"intermediate_size":8,"rope_scaling":{"type":"yarn","factor":2}})",
      "x/config.json", 16);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("yarn"), std::string::npos) << bad.status();
  auto missing = model::ConfigFromPretrained(root_->path() + "/nowhere", 16);
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace orrery
