// The one reader of config.json (worker/hf/config.h) that the worker builds
// models from and the planner counts parameters with: each family's fields and
// defaults, both rotary-scaling forms, and errors that name the file and field.
#include "worker/hf/config.h"

#include <gtest/gtest.h>

namespace orrery::hf {
namespace {

TEST(HfConfigTest, Gpt2DefaultsFollowTransformers) {
  auto c = ParseModelConfig(R"({"model_type": "gpt2", "n_layer": 12, "n_embd": 768,
                                "n_head": 12, "vocab_size": 50257})",
                            "gpt2/config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->Family(), "gpt2");
  EXPECT_EQ(c->intermediate, 4 * 768);  // n_inner null
  EXPECT_EQ(c->max_positions, 1024);    // n_positions
  EXPECT_EQ(c->kv_heads, 12);
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_TRUE(c->tie_embeddings);
  EXPECT_TRUE(c->qkv_bias && c->out_bias && c->mlp_bias);
  EXPECT_EQ(c->activation, "gelu_tanh");  // gelu_new
  EXPECT_TRUE(c->LearnedPositions());
}

TEST(HfConfigTest, ArchitecturesNameTheTypeWhenModelTypeIsMissing) {
  auto c = ParseModelConfig(R"({"architectures": ["Qwen2ForCausalLM"], "num_hidden_layers": 2,
                                "hidden_size": 64, "num_attention_heads": 4,
                                "num_key_value_heads": 2, "intermediate_size": 128,
                                "vocab_size": 320})",
                            "q/config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model_type, "qwen2");
  EXPECT_EQ(c->Family(), "llama");
  EXPECT_TRUE(c->qkv_bias);
  EXPECT_FALSE(c->out_bias || c->mlp_bias);
  EXPECT_FALSE(c->tie_embeddings);
  EXPECT_EQ(c->head_dim, 16);
}

TEST(HfConfigTest, BothRopeFormsAreRead) {
  // transformers 5: rope_parameters.
  auto v5 = ParseModelConfig(R"({"model_type": "llama", "num_hidden_layers": 2,
      "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128,
      "vocab_size": 320, "max_position_embeddings": 4096,
      "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                          "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                          "original_max_position_embeddings": 8192}})",
                             "v5/config.json");
  ASSERT_TRUE(v5.ok()) << v5.status();
  EXPECT_EQ(v5->rope.type, "llama3");
  EXPECT_EQ(v5->rope.theta, 500000.0);
  EXPECT_EQ(v5->rope.factor, 8.0);
  EXPECT_EQ(v5->rope.original_max_positions, 8192);
  // Older: rope_theta at the top and rope_scaling {type, factor}.
  auto v4 = ParseModelConfig(R"({"model_type": "llama", "num_hidden_layers": 2,
      "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128,
      "vocab_size": 320, "rope_theta": 1000000.0,
      "rope_scaling": {"type": "linear", "factor": 2.0}})",
                             "v4/config.json");
  ASSERT_TRUE(v4.ok()) << v4.status();
  EXPECT_EQ(v4->rope.type, "linear");
  EXPECT_EQ(v4->rope.theta, 1000000.0);
  EXPECT_EQ(v4->rope.factor, 2.0);
}

TEST(HfConfigTest, ErrorsNameTheFileAndTheField) {
  struct Case {
    const char* text;
    const char* needle;
  };
  const Case cases[] = {
      {"[1, 2]", "not a JSON object"},
      {R"({"model_type": "bert"})", "model_type 'bert' is not supported"},
      {R"({"model_type": "gpt2", "n_embd": 8, "n_head": 2, "vocab_size": 9})",
       "field n_layer is missing"},
      {R"({"model_type": "gpt2", "n_layer": "two", "n_embd": 8, "n_head": 2, "vocab_size": 9})",
       "field n_layer must be a non-negative integer"},
      {R"({"model_type": "gpt2", "n_layer": 0, "n_embd": 8, "n_head": 2, "vocab_size": 9})",
       "the layers must be at least 1"},
      {R"({"model_type": "gpt2", "n_layer": 1, "n_embd": 8, "n_head": 2, "vocab_size": 9,
           "activation_function": "relu"})",
       "activation_function 'relu'"},
      {R"({"model_type": "llama", "num_hidden_layers": 1, "hidden_size": 8,
           "num_attention_heads": 2, "intermediate_size": 16, "vocab_size": 9,
           "rope_scaling": {"rope_type": "yarn", "factor": 4.0}})",
       "rope_scaling.rope_type 'yarn' is not supported"},
      {R"({"model_type": "llama", "num_hidden_layers": 1, "hidden_size": 8,
           "num_attention_heads": 2, "intermediate_size": 16, "vocab_size": 9,
           "hidden_act": "gelu"})",
       "hidden_act 'gelu'"},
      {R"({"model_type": "qwen2", "num_hidden_layers": 1, "hidden_size": 8,
           "num_attention_heads": 2, "intermediate_size": 16, "vocab_size": 9,
           "use_sliding_window": true})",
       "use_sliding_window true is not supported"},
  };
  for (const Case& c : cases) {
    auto r = ParseModelConfig(c.text, "m/config.json");
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << c.text;
    EXPECT_NE(r.status().message().find("m/config.json"), std::string::npos) << r.status();
    EXPECT_NE(r.status().message().find(c.needle), std::string::npos) << r.status();
  }
}

TEST(HfConfigTest, SequenceMustFitLearnedPositionsAndMistralsWindow) {
  auto gpt2 = ParseModelConfig(R"({"model_type": "gpt2", "n_layer": 1, "n_embd": 8,
                                   "n_head": 2, "vocab_size": 9, "n_positions": 32})",
                               "g");
  ASSERT_TRUE(gpt2.ok());
  EXPECT_TRUE(CheckSequence(*gpt2, 32, "g").ok());
  Status too_long = CheckSequence(*gpt2, 33, "g");
  EXPECT_EQ(too_long.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_long.message().find("use seq <= 32"), std::string::npos) << too_long;
  auto mistral = ParseModelConfig(R"({"model_type": "mistral", "num_hidden_layers": 1,
      "hidden_size": 8, "num_attention_heads": 2, "intermediate_size": 16, "vocab_size": 9,
      "sliding_window": 64})",
                                  "m");
  ASSERT_TRUE(mistral.ok()) << mistral.status();
  EXPECT_TRUE(CheckSequence(*mistral, 64, "m").ok());
  EXPECT_NE(CheckSequence(*mistral, 65, "m").message().find("sliding_window 64"),
            std::string::npos);
  // Rotary positions have no learned bound.
  EXPECT_TRUE(CheckSequence(*mistral, 1, "m").ok());
}

TEST(HfConfigTest, ReadModelConfigWantsADirectoryWithConfigJson) {
  auto r = ReadModelConfig("/nonexistent/model");
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("save_pretrained"), std::string::npos);
}

}  // namespace
}  // namespace orrery::hf
