// deploy/ against a live server: every kvasir_* metric that deploy/kvasir.rules.yml and
// deploy/grafana/kvasir-dashboard.json name (in expressions, annotations or comments) is a family
// the server's /metrics declares ("# TYPE <name> ..."), a histogram's _bucket/_sum/_count series
// counting as its family; and the TTFT SLO's bound, le="2.5", is a bucket the server exposes.
// Names are taken from the files' text: "kvasir_" followed by [A-Za-z0-9_], not inside a
// recording rule's name (level:metric:operation, whose parts touch a ':') and not a wildcard in
// prose ("kvasir_spec_*").
// Syntax and behaviour of the rules and the dashboard are tests/deploy_check.sh's.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <sstream>
#include <string>

#include "server_test_util.h"

namespace kvasir::server::testing {
namespace {

std::string deploy_path(const std::string& name) {
  return std::string(KVASIR_SOURCE_DIR) + "/deploy/" + name;
}

bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

// Every kvasir_* metric name in `text`.
std::set<std::string> referenced_names(const std::string& text) {
  std::set<std::string> out;
  for (size_t at = text.find("kvasir_"); at != std::string::npos;
       at = text.find("kvasir_", at + 1)) {
    if (at > 0 && (name_char(text[at - 1]) || text[at - 1] == ':')) continue;
    size_t end = at;
    while (end < text.size() && name_char(text[end])) ++end;
    if (end < text.size() && text[end] == ':') continue;  // a recording rule's name
    if (end < text.size() && text[end] == '*') continue;  // prose: "the kvasir_spec_* family"
    out.insert(text.substr(at, end - at));
  }
  return out;
}

// name -> type from the exposition's "# TYPE name type" lines.
std::map<std::string, std::string> exposed_families(const std::string& exposition) {
  std::map<std::string, std::string> out;
  std::istringstream lines(exposition);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("# TYPE ", 0) != 0) continue;
    std::istringstream words(line.substr(7));
    std::string name, type;
    words >> name >> type;
    out[name] = type;
  }
  return out;
}

// The family a referenced name belongs to, or "" when the server exposes none.
std::string family_of(const std::string& name, const std::map<std::string, std::string>& fams) {
  if (fams.count(name)) return name;
  for (const char* suffix : {"_bucket", "_sum", "_count"}) {
    const std::string s(suffix);
    if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) {
      auto it = fams.find(name.substr(0, name.size() - s.size()));
      if (it != fams.end() && it->second == "histogram") return it->first;
    }
  }
  return "";
}

struct DeployFile {
  const char* path;  // under deploy/
  std::set<std::string> names;
};

std::vector<DeployFile> deploy_files() {
  std::vector<DeployFile> files = {{"kvasir.rules.yml", {}}, {"grafana/kvasir-dashboard.json", {}}};
  for (DeployFile& f : files) {
    std::string text;
    EXPECT_TRUE(test_util::read_file(deploy_path(f.path), text))
        << "cannot read " << deploy_path(f.path);
    f.names = referenced_names(text);
  }
  return files;
}

TEST(DeployMetricNames, ExtractionFindsMetricsNotRecordingRules) {
  const std::set<std::string> got = referenced_names(
      "rate(kvasir_preemptions_total[5m]) > 1 and model:kvasir_ttft_slo_errors:ratio_rate5m "
      "\"expr\": \"sum(kvasir_time_to_first_token_seconds_bucket{le=\\\"2.5\\\"})\" "
      "uid kvasir-overview x_kvasir_not (kvasir_requests_running/waiting) every kvasir_* name, "
      "kvasir_spec_* too");
  EXPECT_EQ(got, (std::set<std::string>{"kvasir_preemptions_total",
                                        "kvasir_time_to_first_token_seconds_bucket",
                                        "kvasir_requests_running"}));
  EXPECT_EQ(family_of("kvasir_a_bucket", {{"kvasir_a", "histogram"}}), "kvasir_a");
  EXPECT_EQ(family_of("kvasir_a_count", {{"kvasir_a", "counter"}}), "");
  EXPECT_EQ(family_of("kvasir_b_total", {{"kvasir_b_total", "counter"}}), "kvasir_b_total");
}

TEST(DeployMetricNames, FilesNameTheMetricsTheyShould) {
  // A vacuous pass (an unreadable file, an extractor that finds nothing) must fail.
  for (const DeployFile& f : deploy_files()) {
    EXPECT_GE(f.names.size(), 10u) << f.path;
    for (const char* must :
         {"kvasir_time_to_first_token_seconds_bucket", "kvasir_time_to_first_token_seconds_count",
          "kvasir_kv_cache_usage_ratio", "kvasir_preemptions_total", "kvasir_spec_acceptance_rate",
          "kvasir_http_responses_total"})
      EXPECT_TRUE(f.names.count(must)) << f.path << " does not use " << must;
  }
}

class DeployMetrics : public SharedServerTest<DeployMetrics> {
 protected:
  // /metrics after one completion (so that the histograms have series).
  static std::string scrape() {
    HttpResult r = post(port(), "/v1/completions",
                        Json{{"prompt", "Once"}, {"max_tokens", 4}, {"ignore_eos", true}});
    EXPECT_EQ(r.status, 200) << r.body;
    HttpResult m = get(port(), "/metrics");
    EXPECT_EQ(m.status, 200) << m.body;
    return m.body;
  }
};

TEST_F(DeployMetrics, EveryReferencedFamilyIsExposed) {
  const std::string body = scrape();
  const std::map<std::string, std::string> fams = exposed_families(body);
  ASSERT_FALSE(fams.empty()) << body;
  std::string exposed;
  for (const auto& [name, type] : fams) exposed += "\n  " + name + " (" + type + ")";
  for (const DeployFile& f : deploy_files()) {
    std::string missing;
    for (const std::string& name : f.names)
      if (family_of(name, fams).empty()) missing += "\n  " + name;
    EXPECT_TRUE(missing.empty()) << "deploy/" << f.path
                                 << " names metrics that /metrics does not declare (no '# TYPE' "
                                    "line for them, nor a histogram they are a series of):"
                                 << missing << "\nexposed families:" << exposed;
  }
}

TEST_F(DeployMetrics, SloBucketBoundIsExposed) {
  // deploy/kvasir.rules.yml's TTFT SLO counts requests in the le="2.5" bucket: it must be one of
  // the histogram's bounds, spelt as the server spells it.
  const std::string body = scrape();
  EXPECT_NE(
      body.find("\nkvasir_time_to_first_token_seconds_bucket{model=\"stories260K\",le=\"2.5\"} "),
      std::string::npos)
      << body;
  std::string rules;
  ASSERT_TRUE(test_util::read_file(deploy_path("kvasir.rules.yml"), rules));
  EXPECT_NE(rules.find("kvasir_time_to_first_token_seconds_bucket{le=\"2.5\"}"), std::string::npos);
}

}  // namespace
}  // namespace kvasir::server::testing
