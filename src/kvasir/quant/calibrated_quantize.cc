#include "kvasir/quant/calibrated_quantize.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>

#include "kvasir/format/gguf.h"
#include "kvasir/hf/hf_checkpoint.h"
#include "kvasir/model/model.h"
#include "kvasir/quant/awq_fold.h"
#include "kvasir/quant/gptq.h"
#include "kvasir/quant/quant_mixture.h"
#include "kvasir/quant/recon_error.h"
#include "kvasir/tensor/quantize.h"
#include "kvasir/util/error.h"
#include "kvasir/util/timer.h"

namespace kvasir {

namespace {

// The linear weights of a layer, in the order they are reported, with their input group.
constexpr const char* kLinears[] = {"attn_q",   "attn_k", "attn_v",  "attn_output",
                                    "ffn_gate", "ffn_up", "ffn_down"};

bool is_float_type(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16;
}

std::vector<uint8_t> to_bytes(const std::vector<BlockQ4_1>& blocks) {
  std::vector<uint8_t> b(blocks.size() * sizeof(BlockQ4_1));
  std::memcpy(b.data(), blocks.data(), b.size());
  return b;
}

// Round to nearest as the plain Q4_1 file does it (ggml's reference quantizer), decoded.
std::vector<float> rtn_q4_1(const std::vector<float>& w, int64_t rows, int64_t cols) {
  std::vector<uint8_t> q(static_cast<size_t>(rows) * row_bytes(DType::Q4_1, cols));
  quantize_rows(DType::Q4_1, w.data(), q.data(), rows, cols, nullptr);
  std::vector<float> d(w.size());
  const size_t rb = row_bytes(DType::Q4_1, cols);
  for (int64_t r = 0; r < rows; ++r)
    dequantize_row(DType::Q4_1, q.data() + static_cast<size_t>(r) * rb, d.data() + r * cols, cols);
  return d;
}

// diag(s)^-1 G diag(s)^-1
std::vector<double> scaled_gram(const std::vector<double>& g, std::span<const float> s) {
  const size_t n = s.size();
  std::vector<double> out(g.size());
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j) out[i * n + j] = g[i * n + j] / (double{s[i]} * double{s[j]});
  return out;
}

}  // namespace

std::string_view calibrated_method_name(CalibratedMethod m) {
  return m == CalibratedMethod::kGptq ? "gptq4" : "awq4";
}

CalibratedReport quantize_calibrated(const std::string& in_path, const std::string& out_path,
                                     std::span<const int32_t> calib_tokens,
                                     const CalibratedOptions& opt) {
  const std::string_view method = calibrated_method_name(opt.method);
  if (opt.group_size != 32)
    fail(
        "{}: --group-size {}: GGUF Q4_1 stores groups of 32 weights; groups of 64 or 128 need the "
        "{} Hugging Face layout (--format hf), which kvasir does not write yet",
        method, opt.group_size, opt.method == CalibratedMethod::kGptq ? "GPTQ" : "AutoAWQ");
  if (opt.file.dry_run) fail("{}: --dry-run is not supported (calibration is the work)", method);
  if (opt.file.imatrix) fail("{}: --imatrix does not apply (the method calibrates itself)", method);
  if (opt.file.allow_requantize)
    fail("{}: --allow-requantize: calibrated quantization starts from f32/f16/bf16 weights",
         method);
  const double t0 = now_seconds();
  CalibratedReport rep;

  // The plan: the Q4_1 mixture's types; the targets are the layers' linear weights it makes Q4_1.
  const std::unique_ptr<gguf::GGUFFile> file = hf::open_model_file(in_path);
  std::vector<MixtureTensor> desc;
  for (const gguf::TensorInfo& t : file->tensors()) desc.push_back({t.name, t.type, t.shape});
  MixtureOptions mo;
  mo.ftype = FileType::MOSTLY_Q4_1;
  mo.pure = opt.file.pure;
  mo.leave_output_tensor = opt.file.leave_output_tensor;
  mo.output_tensor_type = opt.file.output_tensor_type;
  mo.token_embedding_type = opt.file.token_embedding_type;
  const std::vector<TensorChoice> choices = choose_tensor_types(mixture_model(*file), desc, mo);
  std::map<std::string, DType> chosen;
  for (size_t i = 0; i < desc.size(); ++i) chosen[desc[i].name] = choices[i].type;

  std::unique_ptr<Model> model = Model::load(in_path);
  const ModelConfig cfg = model->config();
  std::map<std::string, bool> target;  // by tensor name
  int n_targets = 0;
  for (int l = 0; l < cfg.n_layers; ++l)
    for (const char* what : kLinears) {
      const std::string name = layer_tensor(l, std::string(what) + ".weight");
      const gguf::TensorInfo* t = file->find_tensor(name);
      if (!t)
        fail("{}: {} has no tensor {} (calibrated quantization knows the llama layer names)",
             method, in_path, name);
      if (!is_float_type(t->type))
        fail("{}: {} is already quantized ({}): start from the f32/f16/bf16 file", method, name,
             dtype_name(t->type));
      const bool is_target = chosen.at(name) == DType::Q4_1;
      target[name] = is_target;
      if (is_target)
        n_targets++;
      else
        rep.notes.push_back(fmt::format(
            "{}: {} in the Q4_1 mixture ({}), converted as it is", name,
            dtype_name(chosen.at(name)),
            choices[static_cast<size_t>(
                        std::find_if(desc.begin(), desc.end(),
                                     [&](const MixtureTensor& d) { return d.name == name; }) -
                        desc.begin())]
                .reason));
    }
  if (n_targets == 0)
    fail("{}: no linear weight of {} is Q4_1 in the Q4_1 mixture", method, in_path);

  ThreadPool pool(opt.file.n_threads);
  const CalibResult calib =
      capture_calibration(*model, pool, calib_tokens, opt.calib, opt.on_calib);
  model.reset();  // the weights are read from the file from here on
  rep.calib_tokens = calib.tokens;
  rep.calib_chunks = calib.chunks;
  rep.calib_seconds = calib.seconds;
  auto stats_of = [&](const std::string& name) -> const CalibStats& {
    const auto it = calib.stats.find(calib_group(name));
    if (it == calib.stats.end()) fail("{}: no calibration activations reached {}", method, name);
    return it->second;
  };

  std::map<std::string, TensorOverride> overrides;
  int index = 0;
  auto report = [&](LayerQuantReport r) {
    r.index = ++index;
    r.count = n_targets;
    if (opt.on_layer) opt.on_layer(r);
    rep.layers.push_back(std::move(r));
  };
  auto shape_of = [&](const std::string& name) {
    const gguf::TensorInfo& t = file->tensor(name);
    return std::pair<int64_t, int64_t>{t.n_elements() / t.shape[0], t.shape[0]};
  };

  if (opt.method == CalibratedMethod::kGptq) {
    GptqOptions go;
    go.damp = opt.damp;
    go.act_order = opt.act_order;
    go.grid_search = opt.grid_search;
    for (int l = 0; l < cfg.n_layers; ++l)
      for (const char* what : kLinears) {
        const std::string name = layer_tensor(l, std::string(what) + ".weight");
        if (!target.at(name)) continue;
        const double ts = now_seconds();
        const auto [rows, cols] = shape_of(name);
        const std::vector<float> w = load_float_tensor(*file, name);
        const CalibStats& st = stats_of(name);
        GptqResult g = gptq_q4_1(w.data(), rows, cols, st.gram.data(), go, &pool);
        LayerQuantReport r;
        r.name = name;
        r.rows = rows;
        r.cols = cols;
        r.err =
            relative_output_error(w.data(), g.dequant.data(), rows, cols, st.gram.data(), &pool);
        r.err_rtn = relative_output_error(w.data(), rtn_q4_1(w, rows, cols).data(), rows, cols,
                                          st.gram.data(), &pool);
        r.damp = g.damp;
        overrides[name] = TensorOverride{DType::Q4_1, to_bytes(g.blocks), "gptq"};
        r.seconds = now_seconds() - ts;
        report(std::move(r));
      }
  } else {
    for (int l = 0; l < cfg.n_layers; ++l) {
      const double ts = now_seconds();
      auto is_target = [&](const char* what) {
        return target.at(layer_tensor(l, std::string(what) + ".weight"));
      };
      const bool do_qkv = is_target("attn_q") && is_target("attn_k") && is_target("attn_v");
      const bool do_o = is_target("attn_output") && is_target("attn_v");
      const bool do_ffn = is_target("ffn_gate") && is_target("ffn_up");
      const bool do_down = is_target("ffn_down") && is_target("ffn_up");
      FloatTensors t;
      auto load = [&](const std::vector<std::string>& names) {
        for (const std::string& n : names)
          if (!t.count(n)) t[n] = load_float_tensor(*file, n);
      };
      load(fold_attn_input_tensors(l));
      load(fold_ffn_input_tensors(l));
      load(fold_attn_output_tensors(cfg, l));
      load(fold_ffn_down_tensors(l));
      const FloatTensors orig = t;
      auto w_of = [&](const char* what) {
        return orig.at(layer_tensor(l, std::string(what) + ".weight")).data();
      };
      auto mean_abs = [](const CalibStats& s) {
        std::vector<double> m(static_cast<size_t>(s.cols));
        for (int64_t j = 0; j < s.cols; ++j) m[static_cast<size_t>(j)] = s.mean_abs(j);
        return m;
      };
      // Input scales per weight (1 where a group is not scaled), alpha per group.
      std::map<std::string, std::vector<float>> in_scale;
      std::map<std::string, double> alpha;
      auto search = [&](std::initializer_list<const char*> whats, std::span<const int64_t> tie) {
        const std::string lead = layer_tensor(l, std::string(*whats.begin()) + ".weight");
        const CalibStats& st = stats_of(lead);
        std::vector<AwqMatrix> mats;
        for (const char* what : whats)
          mats.push_back(
              {w_of(what), shape_of(layer_tensor(l, std::string(what) + ".weight")).first});
        const std::vector<double> ma = mean_abs(st);
        AwqScales s = awq_search_scales(mats, st.cols, st.gram.data(), ma, tie, opt.awq, &pool);
        for (const char* what : whats) {
          in_scale[layer_tensor(l, std::string(what) + ".weight")] = s.scales;
          alpha[layer_tensor(l, std::string(what) + ".weight")] = s.alpha;
        }
        return s.scales;
      };
      const std::vector<int64_t> tie = attn_output_tie(cfg);
      if (do_qkv) fold_attn_input(t, cfg, l, search({"attn_q", "attn_k", "attn_v"}, {}));
      if (do_o) fold_attn_output(t, cfg, l, search({"attn_output"}, tie));
      if (do_ffn) fold_ffn_input(t, cfg, l, search({"ffn_gate", "ffn_up"}, {}));
      if (do_down) fold_ffn_down(t, cfg, l, search({"ffn_down"}, {}));
      // Output-row scales the folds put on attn_v (attn_output's) and ffn_up (ffn_down's).
      std::map<std::string, std::vector<float>> row_scale;
      if (do_o) {
        const std::vector<float>& s = in_scale.at(layer_tensor(l, "attn_output.weight"));
        const int group = cfg.n_heads / cfg.n_kv_heads;
        std::vector<float> sv(static_cast<size_t>(cfg.kv_dim()));
        for (int k = 0; k < cfg.n_kv_heads; ++k)
          for (int d = 0; d < cfg.head_dim; ++d)
            sv[static_cast<size_t>(k * cfg.head_dim + d)] =
                s[static_cast<size_t>(k * group * cfg.head_dim + d)];
        row_scale[layer_tensor(l, "attn_v.weight")] = sv;
      }
      if (do_down)
        row_scale[layer_tensor(l, "ffn_up.weight")] =
            in_scale.at(layer_tensor(l, "ffn_down.weight"));

      for (const char* what : kLinears) {
        const std::string name = layer_tensor(l, std::string(what) + ".weight");
        if (!target.at(name)) continue;
        const double tw = now_seconds();
        const auto [rows, cols] = shape_of(name);
        const CalibStats& st = stats_of(name);
        const auto sit = in_scale.find(name);
        const std::vector<float> ones(static_cast<size_t>(cols), 1.0f);
        const std::vector<float>& s = sit == in_scale.end() ? ones : sit->second;
        const std::vector<double> gs = scaled_gram(st.gram, s);
        const bool clip =
            opt.clip && std::string_view(what) != "attn_q" && std::string_view(what) != "attn_k";
        std::vector<float> deq(static_cast<size_t>(rows * cols));
        const std::vector<float>& ws = t.at(name);
        const std::vector<BlockQ4_1> blocks =
            awq_quantize_q4_1(ws.data(), rows, cols, gs.data(), clip, opt.awq, deq.data(), &pool);
        // What the file computes, in the original weights' terms: columns / s, rows * row scale.
        const auto rit = row_scale.find(name);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t j = 0; j < cols; ++j) {
            float& v = deq[static_cast<size_t>(r * cols + j)];
            v /= s[static_cast<size_t>(j)];
            if (rit != row_scale.end()) v *= rit->second[static_cast<size_t>(r)];
          }
        const std::vector<float>& w = orig.at(name);
        LayerQuantReport r;
        r.name = name;
        r.rows = rows;
        r.cols = cols;
        r.err = relative_output_error(w.data(), deq.data(), rows, cols, st.gram.data(), &pool);
        r.err_rtn = relative_output_error(w.data(), rtn_q4_1(w, rows, cols).data(), rows, cols,
                                          st.gram.data(), &pool);
        r.alpha = sit == in_scale.end() ? -1 : alpha.at(name);
        r.clipped = clip;
        overrides[name] = TensorOverride{DType::Q4_1, to_bytes(blocks), "awq"};
        r.seconds = now_seconds() - tw + (what == kLinears[0] ? tw - ts : 0);
        report(std::move(r));
      }
      // The norms (and V bias) the scales were folded into, in the type the mixture keeps them.
      std::vector<std::string> folded;
      if (do_qkv) folded.push_back(layer_tensor(l, "attn_norm.weight"));
      if (do_ffn) folded.push_back(layer_tensor(l, "ffn_norm.weight"));
      if (do_o && cfg.qkv_bias) folded.push_back(layer_tensor(l, "attn_v.bias"));
      for (const std::string& name : folded) {
        const gguf::TensorInfo& ti = file->tensor(name);
        const DType ty = chosen.at(name);
        const std::vector<float>& v = t.at(name);
        std::vector<uint8_t> bytes(static_cast<size_t>(v.size() / ti.shape[0]) *
                                   row_bytes(ty, ti.shape[0]));
        quantize_rows(ty, v.data(), bytes.data(), static_cast<int64_t>(v.size()) / ti.shape[0],
                      ti.shape[0], nullptr);
        overrides[name] = TensorOverride{ty, std::move(bytes), "awq scales folded in"};
      }
    }
  }

  QuantizeOptions fo = opt.file;
  fo.overrides = &overrides;
  std::string desc_m = std::string(method) + ": group 32 (GGUF Q4_1)";
  if (opt.method == CalibratedMethod::kGptq)
    desc_m += fmt::format(", damp {}{}{}", opt.damp, opt.act_order ? ", act-order" : "",
                          opt.grid_search ? ", grid search" : "");
  else
    desc_m += fmt::format(", alpha grid {}{}", opt.awq.n_grid, opt.clip ? ", clip search" : "");
  fo.extra_metadata.emplace_back("quantize.calibrated.method", desc_m);
  fo.extra_metadata.emplace_back("quantize.calibrated.tokens", std::to_string(calib.tokens));
  rep.file = quantize_gguf(in_path, out_path, FileType::MOSTLY_Q4_1, fo);
  rep.file.seconds = now_seconds() - t0;
  return rep;
}

}  // namespace kvasir
