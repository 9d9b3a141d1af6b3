// An embedder of the installed Kvasir (tests/packaging/install_test.sh builds it against
// `cmake --install` output with `pkg-config --cflags --libs kvasir`): loads a GGUF model and
// prints the greedy continuation of a prompt through the engine, as `kvasir run --temp 0` does.
#include <kvasir/engine.h>
#include <kvasir/model/model.h>
#include <kvasir/tokenizer/tokenizer.h>
#include <kvasir/util/build_info.h>

#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: embed MODEL.gguf PROMPT\n");
    return 2;
  }
  auto model = kvasir::Model::load(argv[1]);
  kvasir::Tokenizer tok = kvasir::Tokenizer::from_gguf(model->file());
  kvasir::EngineConfig cfg;
  cfg.max_seqs = 1;
  cfg.threads = 1;
  kvasir::Engine engine(*model, tok, cfg);
  kvasir::GenerateRequest req;
  req.prompt = tok.encode(argv[2], /*add_special=*/true, /*parse_special=*/false);
  req.params.temperature = 0;
  req.params.max_tokens = 16;
  std::mutex mu;
  std::condition_variable cv;
  std::string text;
  bool done = false;
  engine.submit(std::move(req), [&](const kvasir::RequestOutput& o) {
    std::lock_guard lk(mu);
    text += o.text;
    if (o.finished) {
      done = true;
      cv.notify_all();
    }
  });
  std::unique_lock lk(mu);
  cv.wait(lk, [&] { return done; });
  std::printf("kvasir %s: %s\n", kvasir::build_info().version.c_str(), text.c_str());
  return 0;
}
