// kvasir inspect FILE: metadata, architecture summary and the tensor table of a GGUF file, with
// bits per weight per tensor, per type and for the whole file (as llama-quantize reports it:
// tensor bytes x 8 / elements), and the file type's llama-quantize name (general.file_type).
#include <fmt/format.h>

#include <map>
#include <memory>
#include <string>

#include "commands.h"
#include "kvasir/format/gguf.h"
#include "kvasir/format/safetensors.h"
#include "kvasir/hf/hf_checkpoint.h"
#include "kvasir/model/config.h"
#include "kvasir/quant/quant_mixture.h"
#include "kvasir/util/error.h"

namespace kvasir::cli {

namespace {

// The folder as stored: config.json's architecture, the shards and their tensors (HF names,
// dtypes, row-major shapes), before the GGUF view that follows.
void print_hf_folder(const std::string& folder, const gguf::GGUFFile& view) {
  const auto ck = safetensors::SafetensorsCheckpoint::open(folder);
  fmt::print("folder: {} (Hugging Face model, {} safetensors shard{}, {} bytes)\n", folder,
             ck.shards().size(), ck.shards().size() == 1 ? "" : "s", ck.total_bytes());
  for (const auto& sh : ck.shards())
    fmt::print("  shard {}: {} tensors, {} bytes\n", sh->path(), sh->tensors().size(),
               sh->file_size());
  fmt::print("\nstored tensors ({}):\n", ck.tensors().size());
  for (const safetensors::TensorInfo* t : ck.tensors()) {
    std::string shape;
    for (size_t i = 0; i < t->shape.size(); ++i)
      shape += (i ? ", " : "") + std::to_string(t->shape[i]);
    fmt::print("  {:<52} {:<8} [{}]\n", t->name, safetensors::dtype_name(t->dtype), shape);
  }
  fmt::print("\nas GGUF (what `kvasir convert` writes; {} tensors):\n", view.tensors().size());
}

}  // namespace

Runner add_inspect(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "inspect", "Show a GGUF file's (or a Hugging Face folder's) metadata and tensors");
  auto path = std::make_shared<std::string>();
  auto full = std::make_shared<bool>(false);
  cmd->add_option("file", *path, "GGUF file or Hugging Face model folder")->required();
  cmd->add_flag("--full", *full, "Print long arrays in full");
  return [path, full]() {
    const std::unique_ptr<gguf::GGUFFile> file = hf::open_model_file(*path);
    const gguf::GGUFFile& f = *file;
    if (f.in_memory())
      print_hf_folder(*path, f);
    else
      fmt::print("file: {}\nGGUF version {}, {} bytes, alignment {}, data offset {}\n", *path,
                 f.version(), f.file_size(), f.alignment(), f.data_offset());
    fmt::print("\nmetadata ({} keys):\n", f.metadata().size());
    for (const auto& [k, v] : f.metadata())
      fmt::print("  {:<44} {:<8} {}\n", k, gguf::value_type_name(v.type),
                 v.to_display(*full ? SIZE_MAX : 8));
    if (f.has("general.architecture")) {
      try {
        ModelConfig c = read_model_config(f);
        fmt::print(
            "\narchitecture: {}  dim {}  layers {}  heads {}/{} (kv)  head_dim {}  ffn {}  "
            "ctx {}  rope base {} ({}{})  rms eps {}\n",
            c.arch, c.dim, c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, c.ffn_dim, c.ctx_train,
            c.rope_base, c.rope_neox ? "neox" : "normal",
            c.rope_scaling == "none" ? "" : ", scaling " + c.rope_scaling, c.rms_eps);
      } catch (const Error& e) {
        fmt::print("\narchitecture: not runnable by kvasir: {}\n", e.what());
      }
    }
    uint64_t total = 0, elements = 0;
    struct PerType {
      int n = 0;
      uint64_t bytes = 0, elements = 0;
    };
    std::map<std::string, PerType> per_type;
    fmt::print("\ntensors ({}):\n  {:<36} {:<7} {:<22} {:>12} {:>7}\n", f.tensors().size(), "name",
               "dtype", "shape", "bytes", "bpw");
    auto bpw = [](uint64_t bytes, uint64_t n) { return n == 0 ? 0.0 : 8.0 * bytes / n; };
    for (const auto& t : f.tensors()) {
      std::string shape;
      for (size_t i = 0; i < t.shape.size(); ++i)
        shape += (i ? " x " : "") + std::to_string(t.shape[i]);
      const auto n = static_cast<uint64_t>(t.n_elements());
      fmt::print("  {:<36} {:<7} {:<22} {:>12} {:>7.3f}\n", t.name, dtype_name(t.type), shape,
                 t.nbytes, bpw(t.nbytes, n));
      total += t.nbytes;
      elements += n;
      PerType& p = per_type[std::string(dtype_name(t.type))];
      ++p.n;
      p.bytes += t.nbytes;
      p.elements += n;
    }
    fmt::print("  total tensor bytes: {} ({:.2f} MiB), {} weights, {:.3f} bits per weight\n", total,
               total / 1048576.0, elements, bpw(total, elements));
    fmt::print("\nby type:\n");
    for (const auto& [name, p] : per_type)
      fmt::print(
          "  {:<7} {:>4} tensors {:>12} bytes {:>6.2f}% of the file's weights {:>7.3f} bpw\n", name,
          p.n, p.bytes, elements ? 100.0 * p.elements / elements : 0.0, bpw(p.bytes, p.elements));
    if (const auto* ft = f.find("general.file_type"); ft != nullptr) {
      std::string name = "unknown";
      uint64_t id = 0;
      try {
        id = ft->as_uint();
        name = std::string(mixture_name(static_cast<FileType>(id)));
      } catch (const Error&) {  // not an integer, or a type llama.cpp does not define
      }
      fmt::print("file type (general.file_type): {} ({})\n", name, id);
    }
    return 0;
  };
}

}  // namespace kvasir::cli
