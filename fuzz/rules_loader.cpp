// SPDX-License-Identifier: Apache-2.0
// Fuzz target: the rules loader. The input is a rules file's text, loaded as
// `sluice --check-config` and every reload load it (config::load_string). Besides "no crash,
// no UB, no leak", the target checks the loader's contract (include/sluice/config/loader.hpp):
// a snapshot or diagnostics, never both and never neither; every diagnostic names a file
// and carries a message; the rules file's own are sorted by line (an `api_keys_file:`
// diagnostic is followed by the key file's, which name that file). A snapshot is then used as the
// gateway uses every snapshot it is given: compiled for the request path (app::snapshot: router,
// upstreams, limits per route and plan) and rendered as `GET /admin/config` (which must not throw
// for a validated snapshot, and must be JSON).

#include "app/request_path.hpp"
#include "fuzz_check.hpp"
#include "sluice/config/loader.hpp"
#include "sluice/observability/admin.hpp"

#include <boost/json/parse.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto loaded = sluice::config::load_string(text, "fuzz.yaml");
  FUZZ_CHECK(loaded.ok() == loaded.diagnostics.empty(), "a snapshot xor diagnostics");
  int last_line = 0;
  for (const auto& d : loaded.diagnostics) {
    FUZZ_CHECK(!d.file.empty(), "a diagnostic names a file");
    FUZZ_CHECK(!d.message.empty(), "a diagnostic has a message");
    FUZZ_CHECK(d.line >= 0, "lines are 1-based, or 0 without a position");
    FUZZ_CHECK(d.to_string().rfind(d.file, 0) == 0, "a rendered diagnostic starts with its file");
    if (d.file != "fuzz.yaml") continue;
    FUZZ_CHECK(d.line >= last_line, "the rules file's diagnostics are sorted by line");
    last_line = d.line;
  }
  if (!loaded.ok()) return 0;

  const auto& rules = *loaded.value;
  for (const auto& r : rules.routes) {
    FUZZ_CHECK(rules.upstreams.count(r.upstream) == 1, "every route's upstream exists");
    FUZZ_CHECK(!r.match.path_prefix.empty() || !r.match.path.empty(), "a route has a path");
  }
  const sluice::app::snapshot snap(loaded.value, 1);
  FUZZ_CHECK(snap.routes.size() == rules.routes.size(), "every route is compiled");
  for (const auto& c : snap.routes) {
    FUZZ_CHECK(c.upstream != nullptr, "a compiled route has its upstream");
  }
  const std::string json = sluice::observability::config_json(rules, 1, "fuzz.yaml");
  boost::system::error_code ec;
  (void)boost::json::parse(json, ec);
  FUZZ_CHECK(!ec, "GET /admin/config is JSON");
  return 0;
}
