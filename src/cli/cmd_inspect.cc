// kvasir inspect FILE: metadata, architecture summary and the tensor table of a GGUF file.
#include <fmt/format.h>

#include <memory>
#include <string>

#include "commands.h"
#include "kvasir/format/gguf.h"
#include "kvasir/model/config.h"
#include "kvasir/util/error.h"

namespace kvasir::cli {

Runner add_inspect(CLI::App& app) {
  auto* cmd = app.add_subcommand("inspect", "Show a GGUF file's metadata and tensors");
  auto path = std::make_shared<std::string>();
  auto full = std::make_shared<bool>(false);
  cmd->add_option("file", *path, "GGUF file")->required();
  cmd->add_flag("--full", *full, "Print long arrays in full");
  return [path, full]() {
    gguf::GGUFFile f(*path);
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
    uint64_t total = 0;
    fmt::print("\ntensors ({}):\n  {:<36} {:<6} {:<22} {:>12}\n", f.tensors().size(), "name",
               "dtype", "shape", "bytes");
    for (const auto& t : f.tensors()) {
      std::string shape;
      for (size_t i = 0; i < t.shape.size(); ++i)
        shape += (i ? " x " : "") + std::to_string(t.shape[i]);
      fmt::print("  {:<36} {:<6} {:<22} {:>12}\n", t.name, dtype_name(t.type), shape, t.nbytes);
      total += t.nbytes;
    }
    fmt::print("  total tensor bytes: {} ({:.2f} MiB)\n", total, total / 1048576.0);
    return 0;
  };
}

}  // namespace kvasir::cli
