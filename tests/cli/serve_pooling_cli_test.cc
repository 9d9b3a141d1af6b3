// `kvasir serve --pooling` (how /v1/embeddings pools) and llama.cpp's embedding flags: a bad
// pooling name fails before the model loads, naming the option; llama-server's --embedding(s)
// gets a hint instead of an unknown-option error; --pooling on another command says where it
// belongs.
#include <gtest/gtest.h>

#include "cli_test_util.h"

namespace kvasir::cli_test {
namespace {

TEST(CliServePooling, ABadPoolingNameIsAClearError) {
  const Result r = kvasir("serve -m " + stories() + " --memory 256MiB --port 0 --pooling max");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(has(r.err, "--pooling: expected mean, cls, last or none, got 'max'")) << r.err;
}

TEST(CliServePooling, LlamaCppEmbeddingFlagsGetHints) {
  Result r = kvasir("serve -m " + stories() + " --embedding");
  EXPECT_NE(r.code, 0);
  EXPECT_TRUE(has(r.err, "--embedding: kvasir serve always serves /v1/embeddings")) << r.err;
  r = kvasir("serve -m " + stories() + " --embeddings");
  EXPECT_TRUE(has(r.err, "--embeddings: kvasir serve always serves /v1/embeddings")) << r.err;
  r = kvasir("run -m " + stories() + " --pooling mean -p hi");
  EXPECT_NE(r.code, 0);
  EXPECT_TRUE(has(r.err, "--pooling: only kvasir serve pools embeddings")) << r.err;
  r = kvasir("serve -m " + stories() + " --rerank");
  EXPECT_TRUE(has(r.err, "--rerank: no reranking endpoint")) << r.err;
}

}  // namespace
}  // namespace kvasir::cli_test
