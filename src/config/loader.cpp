// SPDX-License-Identifier: Apache-2.0
// Loading a rules file: yaml-cpp builds the node tree, then one pass turns it into the rules
// model while collecting every diagnostic (DESIGN.md, "The rules file").
//
// Why a hand-written schema walk rather than YAML::convert<>: the operator needs every mistake
// at once, each with a line and a dotted path, and yaml-cpp's conversions throw at the first
// one without a path. Why the cross-checks run after the walk: a route may name an upstream or
// a plan declared further down, and a limit name may be reused anywhere in the file.
//
// Numbers end up in Lua scripts whose numbers are doubles (STYLE.md: integers cross that
// boundary), so every count, burst and cost is checked against 2^53 here, once, and the data
// path never has to interpret a zero, a negative or an inexact value (a zero limit; a TTL
// overflowing its unit).
//
// This file has the entry points and the top-level walk (run()), which reads the top-level
// fields and calls one function per section in the order docs/operating.md lists them
// (loader_internal.hpp says where each part lives).

#include "sluice/config/loader.hpp"

#include "config/loader_internal.hpp"
#include "sluice/utf8.hpp"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace sluice::config {

std::string diagnostic::to_string() const {
  std::string out = file;
  if (line > 0) out += ":" + std::to_string(line);
  out += ": ";
  if (!path.empty()) out += path + ": ";
  out += message;
  return out;
}

namespace detail {

// On redis-cluster: the enforced limits a request can carry with another enforced limit
// (a plan's and a route's together, or two of one list); see limit::split_on_cluster.
void mark_split_limits(rules& r) {
  auto enforced = [](const std::vector<limit>& ls) {
    return static_cast<std::size_t>(std::count_if(
        ls.begin(), ls.end(), [](const limit& l) { return l.mode == limit_mode::enforce; }));
  };
  std::size_t most_in_plan = 0, most_in_route = 0;
  for (const auto& [_, p] : r.plans) most_in_plan = std::max(most_in_plan, enforced(p.limits));
  for (const auto& rt : r.routes) most_in_route = std::max(most_in_route, enforced(rt.limits));
  for (auto& [_, p] : r.plans) {
    const bool split = enforced(p.limits) + most_in_route >= 2;
    for (auto& l : p.limits) l.split_on_cluster = split && l.mode == limit_mode::enforce;
  }
  for (auto& rt : r.routes) {
    const bool split = enforced(rt.limits) + most_in_plan >= 2;
    for (auto& l : rt.limits) l.split_on_cluster = split && l.mode == limit_mode::enforce;
  }
}

load_result loader::run(const YAML::Node& root) {
  if (root.IsNull()) {
    error(1, "", "the rules file is empty");
    return fail();
  }
  if (!root.IsMap()) {
    error(line_of(root, 1), "", "expected a mapping at the top level, got " + describe(root));
    return fail();
  }
  static const std::vector<std::string> keys{"listen",        "admin",
                                             "workers",       "store",
                                             "headers",       "retry_after_jitter",
                                             "drain_timeout", "client_timeout",
                                             "shadow_header", "decision_time_header",
                                             "upstreams",     "identity",
                                             "plans",         "api_keys",
                                             "routes",        "api_keys_file",
                                             "cors",          "client",
                                             "access_log",    "tls",
                                             "status",        "rate_limit_service",
                                             "http2"};
  auto top = fields(root, "", 1, keys);
  auto r = std::make_shared<rules>();
  r->source = file_;

  // Top-level fields, then one section after another, in the order of docs/operating.md;
  // each section is read in its own file (src/config/sections/).
  if (const entry* e = top->find("listen")) {
    if (auto a = address(*e, "listen", true)) {
      r->listen_host = a->host;
      r->listen_port = a->port;
    }
  }
  if (const entry* e = top->find("admin")) parse_admin(*e, *r);
  if (const entry* e = top->find("workers")) {
    if (auto v = integer(*e, "workers", "workers", 0, max_workers))
      r->workers = static_cast<unsigned>(*v);
  }
  if (const entry* e = top->find("drain_timeout")) {
    if (auto d = duration(*e, "drain_timeout", "drain_timeout", std::chrono::hours{1}))
      r->drain_timeout = *d;
  }
  if (const entry* e = top->find("http2")) {
    if (auto v = boolean(*e, "http2")) r->http2 = *v;
  }
  if (const entry* e = top->find("retry_after_jitter")) {
    if (auto d = duration(*e, "retry_after_jitter", "retry_after_jitter", std::chrono::hours{1}))
      r->retry_after_jitter = *d;
  }
  if (const entry* e = top->find("shadow_header")) {
    if (auto h = gateway_header(*e, "shadow_header")) r->shadow_header = *h;
  }
  if (const entry* e = top->find("decision_time_header")) {
    if (auto h = gateway_header(*e, "decision_time_header")) r->decision_time_header = *h;
  }
  if (const entry* e = top->find("headers")) parse_headers(*e, *r);
  {
    std::optional<std::chrono::milliseconds> legacy;
    if (const entry* e = top->find("client_timeout"))
      legacy = duration(*e, "client_timeout", "client_timeout", std::chrono::hours{1});
    parse_client(top->find("client"), legacy, *r);
  }
  if (const entry* e = top->find("access_log")) parse_access_log(*e, *r);
  if (const entry* e = top->find("status")) parse_status(*e, *r);
  if (const entry* e = top->find("tls")) parse_tls(*e, *r);
  if (const entry* e = top->find("store")) parse_store(*e, *r);
  if (const entry* e = top->find("upstreams")) parse_upstreams(*e, *r);
  if (const entry* e = top->find("identity")) parse_identity(*e, *r);
  if (const entry* e = top->find("cors")) r->cors = parse_cors(*e, "cors");
  if (const entry* e = top->find("plans")) parse_plans(*e);
  if (const entry* e = top->find("api_keys")) parse_api_keys(*e);
  if (const entry* e = top->find("routes")) parse_routes(*e);
  if (const entry* e = top->find("rate_limit_service")) parse_rate_limit_service(*e, *r);

  cross_check(*r);
  if (!diags_.empty()) return fail();

  // The key file is read once the plans are known (its lines name them).
  if (const entry* e = top->find("api_keys_file")) {
    if (auto s = non_empty(*e, "api_keys_file")) {
      std::string file = *s;
      const auto slash = file_.rfind('/');
      if (file.front() != '/' && slash != std::string::npos)
        file = file_.substr(0, slash + 1) + file;  // relative to the rules file
      std::vector<std::string> names;
      for (const auto& p : plans_) names.push_back(p.name);
      if (std::find(names.begin(), names.end(), "anonymous") == names.end())
        names.emplace_back("anonymous");
      auto [keys, problems] = api_key_file::load(file, std::move(names));
      if (!keys) {
        error(e->line, "api_keys_file", "the key file '" + file + "' is invalid:");
        for (auto& d : problems) diags_.push_back(std::move(d));
        return {nullptr, std::move(diags_)};
      }
      r->api_keys_file = std::move(keys);
    }
    if (!diags_.empty()) return fail();
  }

  for (auto& p : plans_) {
    plan& out = r->plans[p.name];
    out.name = p.name;
    for (auto& l : p.limits) out.limits.push_back(std::move(l.value));
  }
  if (!r->plans.contains("anonymous")) r->plans["anonymous"].name = "anonymous";
  for (auto& k : api_keys_) r->api_keys[k.key] = k.plan;
  for (auto& rs : routes_) {
    for (auto& l : rs.limits) rs.value.limits.push_back(std::move(l.value));
    r->routes.push_back(std::move(rs.value));
  }
  for (auto& l : rls_limits_) r->rate_limit_service.limits.push_back(std::move(l.value));
  if (r->store.type == store_settings::kind::redis_cluster) mark_split_limits(*r);
  return {std::move(r), {}};
}

}  // namespace detail

namespace {

/// The documents of a YAML stream, counted without building them.
struct document_count {
  std::size_t documents = 0;
  int second_line = 0;  ///< 1-based line of the second document's first node (or its start)
  /// Where the parser stopped advancing (it reported a document there twice), if it did.
  std::optional<YAML::Mark> stuck_at;
};

/// Counts the documents of `text` through yaml-cpp's event parser. Why not YAML::LoadAll:
/// yaml-cpp 0.7 never leaves it on some malformed text — a `,` outside any flow collection
/// (a file that starts with one, `!tag ,`) is skipped without consuming it, and every call
/// then reports one more empty document at the same place, forever, each kept in memory (a
/// 1-byte rules file took the process's whole memory; found by fuzzing). Here every document
/// must begin after the one before, so the count ends. Throws YAML::Exception on a syntax
/// error, as LoadAll does.
document_count count_documents(const std::string& text) {
  struct marks final : YAML::EventHandler {
    std::optional<YAML::Mark> start, first_node;
    void node(const YAML::Mark& m) {
      if (!first_node) first_node = m;
    }
    void OnDocumentStart(const YAML::Mark& m) override {
      start = m;
      first_node.reset();
    }
    void OnDocumentEnd() override {}
    void OnNull(const YAML::Mark& m, YAML::anchor_t) override { node(m); }
    void OnAlias(const YAML::Mark& m, YAML::anchor_t) override { node(m); }
    void OnScalar(const YAML::Mark& m, const std::string&, YAML::anchor_t,
                  const std::string&) override {
      node(m);
    }
    void OnSequenceStart(const YAML::Mark& m, const std::string&, YAML::anchor_t,
                         YAML::EmitterStyle::value) override {
      node(m);
    }
    void OnSequenceEnd() override {}
    void OnMapStart(const YAML::Mark& m, const std::string&, YAML::anchor_t,
                    YAML::EmitterStyle::value) override {
      node(m);
    }
    void OnMapEnd() override {}
  };
  document_count out;
  std::istringstream in(text);
  YAML::Parser parser(in);
  marks h;
  std::optional<int> last_start;
  while (parser.HandleNextDocument(h)) {
    if (h.start && last_start && h.start->pos <= *last_start) {
      out.stuck_at = h.start;
      break;
    }
    last_start = h.start ? h.start->pos : -1;
    if (++out.documents == 2) {
      const auto& at = h.first_node ? h.first_node : h.start;
      out.second_line = at ? at->line + 1 : 0;
    }
  }
  return out;
}

}  // namespace

load_result load_string(std::string_view text, std::string file) {
  detail::loader l(file);
  // YAML text is Unicode (YAML 1.2 §5.2), and every string of the rules ends up in UTF-8
  // documents (metric labels, /admin/config, the JSON access log): ill-formed UTF-8 is
  // refused here, once, rather than reaching them (yaml-cpp does not check it). The bytes
  // themselves are not echoed: they are not text.
  if (const auto bad = utf8::first_invalid(text); bad != std::string_view::npos) {
    const auto before = text.substr(0, bad);
    const auto line = 1 + std::count(before.begin(), before.end(), '\n');
    const auto line_start = before.rfind('\n');
    const auto column = bad - (line_start == std::string_view::npos ? 0 : line_start + 1) + 1;
    static constexpr char hex[] = "0123456789ABCDEF";
    const auto byte = static_cast<unsigned char>(text[bad]);
    l.error(static_cast<int>(line), "",
            std::string("not UTF-8: byte 0x") + hex[byte >> 4] + hex[byte & 15] + " at column " +
                std::to_string(column) +
                " does not begin a well-formed UTF-8 sequence (save the file as UTF-8)");
    return l.fail();
  }
  try {
    const std::string whole(text);
    const auto docs = count_documents(whole);
    if (docs.stuck_at) {
      // Where yaml-cpp stopped advancing: name the character when it is a printable one.
      const auto& m = *docs.stuck_at;
      const auto pos = static_cast<std::size_t>(m.pos);
      const char c = pos < whole.size() ? whole[pos] : '\0';
      const std::string what = c > ' ' && c < 0x7f ? "'" + std::string(1, c) + "'" : "the text";
      l.error(m.line + 1, "",
              "invalid YAML: " + what + " at column " + std::to_string(m.column + 1) +
                  " cannot start a value here (quote it, or put it inside [ ] or { })");
      return l.fail();
    }
    if (docs.documents > 1) {
      l.error(docs.second_line, "",
              "expected one YAML document, found " + std::to_string(docs.documents));
      return l.fail();
    }
    return l.run(docs.documents == 0 ? YAML::Node() : YAML::Load(whole));
  } catch (const YAML::Exception& e) {
    l.error(e.mark.is_null() ? 0 : e.mark.line + 1, "", "invalid YAML: " + e.msg);
  } catch (const std::exception& e) {
    l.error(0, "", std::string("internal error while loading: ") + e.what());
  } catch (...) {
    l.error(0, "", "internal error while loading");
  }
  return l.fail();
}

load_result load_file(const std::string& path) {
  std::string content;
  if (std::string why = file::read_regular(path, max_rules_file_bytes, content); !why.empty()) {
    load_result out;
    out.diagnostics.push_back({path, 0, "", std::move(why)});
    return out;
  }
  return load_string(content, path);
}

std::string listen_address::to_string() const {
  const std::string p = std::to_string(port);
  return host.find(':') == std::string::npos ? host + ":" + p : "[" + host + "]:" + p;
}

std::optional<listen_address> parse_listen_address(std::string_view text, std::string& error) {
  auto a = detail::check_address(text, true, error);
  if (!a) return std::nullopt;
  return listen_address{a->host, a->port};
}

std::optional<unsigned> parse_workers(std::string_view text, std::string& error) {
  auto v = detail::check_integer(text, "workers", 0, max_workers, error);
  if (!v) return std::nullopt;
  return static_cast<unsigned>(*v);
}

std::optional<std::chrono::milliseconds> parse_duration(std::string_view text) {
  const auto r = text::parse_duration(text);
  if (r.error != text::duration_error::none) return std::nullopt;
  return r.value;
}

std::optional<rate> parse_rate(std::string_view text) {
  const auto r = text::parse_rate(text);
  if (r.error != text::rate_error::none) return std::nullopt;
  return r.value;
}

}  // namespace sluice::config
