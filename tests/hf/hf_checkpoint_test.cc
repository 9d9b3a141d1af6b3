// A Hugging Face folder seen as GGUF (hf/hf_checkpoint.h): the names, shapes and dtypes the
// converter writes, the Q/K permutation checked row by row against its definition, tied
// embeddings, shards, and an error naming the file and the tensor for each thing a folder can get
// wrong.
#include "kvasir/hf/hf_checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "hf_folder_util.h"
#include "kvasir/format/safetensors.h"
#include "kvasir/util/error.h"

namespace kvasir::hf {
namespace {

using test_util::TinyHfSpec;
using test_util::write_tiny_hf_folder;
using ::testing::HasSubstr;
namespace st = safetensors;

std::string error_of(const std::string& folder) {
  try {
    open_hf_folder(folder);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool same_bytes(const gguf::TensorInfo& a, const st::TensorInfo& b) {
  return a.nbytes == b.nbytes() && std::memcmp(a.data, b.data, a.nbytes) == 0;
}

TEST(HfCheckpoint, TinyStoriesFolderIsTheGgufTheConverterWrites) {
  const std::string dir = test_util::tinystories656k_dir();
  ASSERT_TRUE(is_hf_folder(dir)) << dir;
  const auto f = open_hf_folder(dir);
  EXPECT_TRUE(f->in_memory());
  EXPECT_EQ(f->get_string("general.architecture"), "llama");
  EXPECT_EQ(f->get_int("llama.embedding_length"), 128);
  EXPECT_EQ(f->get_int("llama.block_count"), 2);
  EXPECT_EQ(f->get_int("llama.attention.head_count"), 8);
  EXPECT_EQ(f->get_int("llama.attention.head_count_kv"), 4);
  EXPECT_EQ(f->get_int("llama.feed_forward_length"), 384);
  EXPECT_EQ(f->get_int("llama.context_length"), 512);
  EXPECT_FLOAT_EQ(static_cast<float>(f->get_float("llama.attention.layer_norm_rms_epsilon")),
                  1e-6f);
  EXPECT_EQ(f->get_string("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(f->get_int("tokenizer.ggml.bos_token_id"), 1);
  EXPECT_EQ(f->get_int("tokenizer.ggml.eos_token_id"), 2);
  EXPECT_EQ(f->get_string_array("tokenizer.ggml.tokens").size(), 2048u);
  // Tied: the one stored matrix (lm_head.weight) is the embedding table. (Two opens map the file
  // twice, so the bytes are compared, not the addresses.)
  const auto ck = st::SafetensorsCheckpoint::open(dir);
  const gguf::TensorInfo& emb = f->tensor("token_embd.weight");
  EXPECT_TRUE(same_bytes(emb, ck.tensor("lm_head.weight")));
  EXPECT_EQ(emb.shape, (std::vector<int64_t>{128, 2048}));
  EXPECT_EQ(f->find_tensor("output.weight"), nullptr);
  // 1 + 9 per layer + output_norm.
  EXPECT_EQ(f->tensors().size(), 1u + 2 * 9 + 1);
  // V is not permuted.
  EXPECT_TRUE(same_bytes(f->tensor("blk.1.attn_v.weight"),
                         ck.tensor("model.layers.1.self_attn.v_proj.weight")));
  EXPECT_EQ(f->file_size(), ck.total_bytes());
}

// convert_hf_to_gguf.py's permute(w, n_head): w.reshape(n_head, 2, hd/2, cols).swapaxes(1, 2),
// i.e. GGUF row h*hd + 2i + j is HF row h*hd + j*hd/2 + i.
TEST(HfCheckpoint, QueryAndKeyRowsArePermutedBackToAdjacentPairs) {
  const std::string dir = test_util::tinystories656k_dir();
  const auto f = open_hf_folder(dir);
  const auto ck = st::SafetensorsCheckpoint::open(dir);
  for (const auto& [hf_name, gguf_name, heads] :
       {std::tuple{"model.layers.0.self_attn.q_proj.weight", "blk.0.attn_q.weight", 8},
        std::tuple{"model.layers.1.self_attn.k_proj.weight", "blk.1.attn_k.weight", 4}}) {
    SCOPED_TRACE(gguf_name);
    const st::TensorInfo& src = ck.tensor(hf_name);
    const gguf::TensorInfo& dst = f->tensor(gguf_name);
    ASSERT_EQ(src.nbytes(), dst.nbytes);
    const int64_t rows = src.shape[0], cols = src.shape[1], hd = rows / heads;
    const size_t rb = static_cast<size_t>(cols) * 4;
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < hd / 2; ++i)
        for (int64_t j = 0; j < 2; ++j)
          ASSERT_EQ(std::memcmp(dst.data + (h * hd + 2 * i + j) * rb,
                                src.data + (h * hd + j * hd / 2 + i) * rb, rb),
                    0)
              << "head " << h << " pair " << i << " half " << j;
  }
}

TEST(HfCheckpoint, UntiedFolderKeepsItsOutputMatrix) {
  TinyHfSpec s;
  s.tied = false;
  const auto f = open_hf_folder(write_tiny_hf_folder("untied", s));
  ASSERT_NE(f->find_tensor("output.weight"), nullptr);
  EXPECT_EQ(f->tensor("output.weight").shape, (std::vector<int64_t>{16, 2048}));
}

TEST(HfCheckpoint, TiedFolderWithBothMatricesKeepsOnlyTheEmbeddings) {
  TinyHfSpec s;
  const std::string dir = write_tiny_hf_folder("tied-both", s, [](auto& t) {
    t["lm_head.weight"] = {st::DType::F32, {2048, 16}};
  });
  const auto f = open_hf_folder(dir);
  EXPECT_EQ(f->find_tensor("output.weight"), nullptr);
  EXPECT_NE(f->find_tensor("token_embd.weight"), nullptr);
}

TEST(HfCheckpoint, HalfPrecisionMatricesStayHalfAndNormsBecomeF32) {
  for (st::DType dt : {st::DType::F16, st::DType::BF16}) {
    SCOPED_TRACE(std::string(st::dtype_name(dt)));
    TinyHfSpec s;
    s.dtype = dt;
    const std::string dir =
        write_tiny_hf_folder(std::string("half-") + std::string(st::dtype_name(dt)), s);
    const auto f = open_hf_folder(dir);
    const DType want = dt == st::DType::F16 ? DType::F16 : DType::BF16;
    EXPECT_EQ(f->tensor("blk.0.ffn_up.weight").type, want);
    EXPECT_EQ(f->get_int("general.file_type"), dt == st::DType::F16 ? 1 : 32);
    const gguf::TensorInfo& norm = f->tensor("blk.0.attn_norm.weight");
    ASSERT_EQ(norm.type, DType::F32);
    const auto ck = st::SafetensorsCheckpoint::open(dir);
    const st::TensorInfo& src = ck.tensor("model.layers.0.input_layernorm.weight");
    for (int i = 0; i < 16; ++i) {
      uint16_t h;
      std::memcpy(&h, src.data + 2 * i, 2);
      const float want_f = dt == st::DType::F16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
      float got;
      std::memcpy(&got, norm.data + 4 * i, 4);
      EXPECT_EQ(got, want_f) << i;  // widening is exact
    }
  }
}

TEST(HfCheckpoint, ShardedFolderGivesTheSameView) {
  const std::string single = write_tiny_hf_folder("single");
  const std::string sharded = test_util::temp_dir() + "/sharded";
  std::filesystem::remove_all(sharded);
  std::filesystem::create_directories(sharded);
  for (const char* name : {"config.json", "tokenizer.json", "tokenizer_config.json"})
    std::filesystem::copy_file(std::filesystem::path(single) / name,
                               std::filesystem::path(sharded) / name);
  {
    const auto ck = st::SafetensorsCheckpoint::open(single);
    st::SafetensorsWriter w;
    for (const st::TensorInfo* t : ck.tensors())
      w.add_tensor(t->name, t->dtype, t->shape, t->data, t->nbytes());
    EXPECT_GT(w.write_sharded(sharded, 64 * 1024).size(), 1u);
  }
  const auto a = open_hf_folder(single), b = open_hf_folder(sharded);
  ASSERT_EQ(a->tensors().size(), b->tensors().size());
  for (size_t i = 0; i < a->tensors().size(); ++i) {
    const auto &x = a->tensors()[i], &y = b->tensors()[i];
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.type, y.type);
    EXPECT_EQ(x.shape, y.shape);
    ASSERT_EQ(x.nbytes, y.nbytes);
    EXPECT_EQ(std::memcmp(x.data, y.data, x.nbytes), 0) << x.name;
  }
}

// Qwen2 and Qwen3 run NeoX RoPE on the rows as stored (no permutation, read in place); Qwen2's
// biases and Qwen3's per-head Q/K norms come along as F32 vectors.
TEST(HfCheckpoint, QwenFoldersKeepTheirRowsAndBringBiasesOrNorms) {
  for (const char* arch : {"Qwen2ForCausalLM", "Qwen3ForCausalLM"}) {
    SCOPED_TRACE(arch);
    TinyHfSpec s;
    s.arch = arch;
    const std::string dir = write_tiny_hf_folder(std::string("qwen-") + arch, s);
    const auto f = open_hf_folder(dir);
    const auto ck = st::SafetensorsCheckpoint::open(dir);
    const bool qwen3 = std::string(arch) == "Qwen3ForCausalLM";
    EXPECT_EQ(f->get_string("general.architecture"), qwen3 ? "qwen3" : "qwen2");
    EXPECT_TRUE(same_bytes(f->tensor("blk.0.attn_q.weight"),
                           ck.tensor("model.layers.0.self_attn.q_proj.weight")));
    if (qwen3) {
      EXPECT_EQ(f->tensor("blk.1.attn_k_norm.weight").shape, (std::vector<int64_t>{8}));
      EXPECT_EQ(f->find_tensor("blk.0.attn_q.bias"), nullptr);
    } else {
      EXPECT_EQ(f->tensor("blk.1.attn_k.bias").shape, (std::vector<int64_t>{8}));
    }
  }
}

TEST(HfCheckpoint, MissingTensorIsNamed) {
  const std::string dir = write_tiny_hf_folder(
      "missing", {}, [](auto& t) { t.erase("model.layers.1.mlp.up_proj.weight"); });
  EXPECT_THAT(error_of(dir), HasSubstr("missing tensor for 'blk.1.ffn_up.weight'"));
}

TEST(HfCheckpoint, WrongShapeNamesTheFileAndTheTensor) {
  const std::string dir = write_tiny_hf_folder("shape", {}, [](auto& t) {
    t["model.layers.0.self_attn.k_proj.weight"].shape = {16, 16};
  });
  const std::string e = error_of(dir);
  EXPECT_THAT(e, HasSubstr("model.safetensors: tensor 'model.layers.0.self_attn.k_proj.weight' "
                           "has shape [16, 16], expected [8, 16] from config.json"));
}

TEST(HfCheckpoint, UnknownTensorIsRefusedNotIgnored) {
  const std::string dir = write_tiny_hf_folder("unknown", {}, [](auto& t) {
    t["model.layers.0.mlp.experts.0.up_proj.weight"] = {st::DType::F32, {32, 16}};
  });
  EXPECT_THAT(error_of(dir), HasSubstr("tensor 'model.layers.0.mlp.experts.0.up_proj.weight' "
                                       "is not one kvasir knows"));
}

TEST(HfCheckpoint, ExtraLayerIsRefused) {
  const std::string dir = write_tiny_hf_folder("extra-layer", {}, [](auto& t) {
    t["model.layers.2.mlp.up_proj.weight"] = {st::DType::F32, {32, 16}};
  });
  EXPECT_THAT(error_of(dir), HasSubstr("'model.layers.2.mlp.up_proj.weight' is not part of a "
                                       "2-layer LlamaForCausalLM"));
}

TEST(HfCheckpoint, SameWeightTwiceIsRefused) {
  const std::string dir = write_tiny_hf_folder("twice", {}, [](auto& t) {
    t["model.layers.01.mlp.up_proj.weight"] = {st::DType::F32, {32, 16}};
  });
  EXPECT_THAT(error_of(dir), HasSubstr("are the same weight (blk.1.ffn_up.weight)"));
}

TEST(HfCheckpoint, IntegerDtypeIsRefusedByName) {
  const std::string dir = write_tiny_hf_folder("int-dtype", {}, [](auto& t) {
    t["model.layers.0.mlp.down_proj.weight"].dt = st::DType::I32;
  });
  EXPECT_THAT(error_of(dir), HasSubstr("tensor 'model.layers.0.mlp.down_proj.weight' has dtype "
                                       "I32, expected F32, F16 or BF16"));
}

TEST(HfCheckpoint, UntiedWithoutLmHeadIsAnError) {
  TinyHfSpec s;
  s.tied = false;
  const std::string dir =
      write_tiny_hf_folder("no-head", s, [](auto& t) { t.erase("lm_head.weight"); });
  EXPECT_THAT(error_of(dir), HasSubstr("lm_head.weight is missing and tie_word_embeddings is "
                                       "false"));
}

TEST(HfCheckpoint, QuantizedCheckpointIsRefusedNamingItsMethod) {
  TinyHfSpec s;
  nlohmann::json cfg = test_util::tiny_hf_config(s);
  cfg["quantization_config"] = {{"quant_method", "awq"}, {"bits", 4}, {"group_size", 128}};
  const std::string dir = write_tiny_hf_folder(
      "awq", s, [](auto&) {}, cfg);
  EXPECT_THAT(error_of(dir), HasSubstr("quantization_config (quant_method 'awq')"));
}

TEST(HfCheckpoint, VocabularyIsPaddedToTheEmbeddingRows) {
  TinyHfSpec s;
  s.vocab = 2050;  // two rows more than the tokenizer has tokens
  const auto f = open_hf_folder(write_tiny_hf_folder("padded", s));
  const auto tokens = f->get_string_array("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens.size(), 2050u);
  EXPECT_EQ(tokens[2048], "[PAD2048]");
  EXPECT_EQ(f->get_int_array("tokenizer.ggml.token_type").size(), 2050u);
}

TEST(HfCheckpoint, ModelPathOpensFilesAndFolders) {
  EXPECT_TRUE(open_model_file(test_util::stories260k_path())->in_memory() == false);
  EXPECT_TRUE(open_model_file(test_util::tinystories656k_dir())->in_memory());
  const std::string empty = test_util::temp_dir() + "/empty-folder";
  std::filesystem::create_directories(empty);
  try {
    open_model_file(empty);
    FAIL() << "an empty folder opened";
  } catch (const Error& e) {
    EXPECT_THAT(std::string(e.what()), HasSubstr("a folder without config.json"));
  }
}

}  // namespace
}  // namespace kvasir::hf
