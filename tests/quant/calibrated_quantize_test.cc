// End to end on stories260K (quant/calibrated_quantize.h): gptq4 (with and without act-order) and
// awq4 files made from the shared calibration text load in kvasir and have lower perplexity than
// the round-to-nearest Q4_1 file at ctx 256 on the shared evaluation text; they differ from that
// file only in the calibrated tensors; and what the slice cannot write is refused by name.
// Kept small for CI: 8192 calibration tokens, 24 evaluation chunks (3072 scored predictions).
#include "kvasir/quant/calibrated_quantize.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "kvasir/eval/perplexity.h"
#include "kvasir/format/gguf.h"
#include "kvasir/model/model.h"
#include "kvasir/tokenizer/tokenizer.h"
#include "kvasir/util/error.h"
#include "test_util/files.h"
#include "test_util/paths.h"

namespace kvasir {
namespace {

struct Fixture {
  std::string in = test_util::stories260k_path();
  std::string dir = test_util::temp_dir("kvasir-calibrated");
  std::vector<int32_t> calib, eval;
  int bos = -1;
  Fixture() {
    const gguf::GGUFFile f(in);
    const Tokenizer tok = Tokenizer::from_gguf(f);
    bos = tok.add_bos() ? tok.bos_id() : -1;
    auto text = [](const std::string& name) {
      std::string s = test_util::read_file(test_util::text_dir() + "/" + name);
      if (!s.empty() && s.back() == '\n') s.pop_back();
      return s;
    };
    calib = tok.encode(text("tinystories-calib.txt"), true, false);
    eval = tok.encode(text("tinystories-eval.txt"), true, false);
  }
  double ppl(const std::string& path) const {
    auto m = Model::load(path);
    ThreadPool pool(2);
    PerplexityOptions po;
    po.ctx = 256;
    po.bos_id = bos;
    po.max_chunks = 24;
    return perplexity(*m, pool, eval, po).ppl;
  }
  CalibratedOptions options(CalibratedMethod m) const {
    CalibratedOptions o;
    o.method = m;
    o.calib.bos_id = bos;
    o.calib.max_tokens = 8192;
    o.file.n_threads = 2;
    return o;
  }
};

TEST(CalibratedQuantize, GptqAndAwqBeatRoundToNearestOnStories260K) {
  const Fixture fx;
  const std::string rtn = fx.dir + "/rtn-q4_1.gguf";
  QuantizeOptions qo;
  qo.n_threads = 2;
  quantize_gguf(fx.in, rtn, FileType::MOSTLY_Q4_1, qo);
  const double p_f32 = fx.ppl(fx.in), p_rtn = fx.ppl(rtn);

  struct Variant {
    const char* name;
    CalibratedMethod m;
    bool act_order;
  };
  for (const Variant v : {Variant{"gptq4", CalibratedMethod::kGptq, false},
                          Variant{"gptq4-act-order", CalibratedMethod::kGptq, true},
                          Variant{"awq4", CalibratedMethod::kAwq, false}}) {
    CalibratedOptions o = fx.options(v.m);
    o.act_order = v.act_order;
    const std::string out = fx.dir + "/" + v.name + ".gguf";
    const CalibratedReport r = quantize_calibrated(fx.in, out, fx.calib, o);
    EXPECT_EQ(r.calib_tokens, 8192);
    // 5 layers x (q, k, v, o, gate, up); ffn_down's rows of 172 fall back to f16 in Q4_1.
    ASSERT_EQ(r.layers.size(), 30u) << v.name;
    double err = 0, err_rtn = 0;
    for (const LayerQuantReport& l : r.layers) {
      err += l.err;
      err_rtn += l.err_rtn;
    }
    EXPECT_LT(err, err_rtn) << v.name;
    const double p = fx.ppl(out);
    EXPECT_LT(p, p_rtn) << v.name << ": f32 " << p_f32 << ", rtn q4_1 " << p_rtn;
    EXPECT_GT(p, p_f32 * 0.98) << v.name;

    // Only the calibrated tensors (and, for AWQ, the norms it folded into) differ from the
    // round-to-nearest file.
    const gguf::GGUFFile a(rtn), b(out);
    ASSERT_EQ(a.tensors().size(), b.tensors().size());
    for (const gguf::TensorInfo& ta : a.tensors()) {
      const gguf::TensorInfo& tb = b.tensor(ta.name);
      EXPECT_EQ(ta.type, tb.type) << ta.name;
      const bool calibrated =
          std::any_of(r.layers.begin(), r.layers.end(),
                      [&](const LayerQuantReport& l) { return l.name == ta.name; }) ||
          (v.m == CalibratedMethod::kAwq && ta.name.find("_norm.weight") != std::string::npos &&
           ta.name.starts_with("blk."));
      if (!calibrated) {
        EXPECT_EQ(std::memcmp(ta.data, tb.data, ta.nbytes), 0) << v.name << " " << ta.name;
      }
    }
    EXPECT_NE(b.get_string("quantize.calibrated.method", "")
                  .find(v.m == CalibratedMethod::kGptq ? "gptq4" : "awq4"),
              std::string::npos);
  }
}

TEST(CalibratedQuantize, RefusesWhatGgufQ4_1CannotStore) {
  const Fixture fx;
  CalibratedOptions o = fx.options(CalibratedMethod::kGptq);
  o.group_size = 128;
  try {
    quantize_calibrated(fx.in, fx.dir + "/x.gguf", fx.calib, o);
    FAIL() << "group size 128 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--group-size 128"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("Hugging Face layout"), std::string::npos) << e.what();
  }
  // A quantized input is refused: the Q4_1 file itself.
  const std::string q = fx.dir + "/q8.gguf";
  quantize_gguf(fx.in, q, FileType::MOSTLY_Q8_0, QuantizeOptions{});
  try {
    quantize_calibrated(q, fx.dir + "/y.gguf", fx.calib, fx.options(CalibratedMethod::kAwq));
    FAIL() << "quantized input accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("already quantized"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kvasir
