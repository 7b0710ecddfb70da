// SPDX-License-Identifier: Apache-2.0
#include "support/openai_upstream.hpp"

#include "support/eventually.hpp"

#include <boost/json.hpp>

#include <fstream>
#include <regex>
#include <stdexcept>
#include <thread>

namespace sluice::test {

namespace {

std::vector<std::string> command(const std::filesystem::path& record, openai_upstream::settings s) {
  // Under timeout(1) as well: a test that dies without its destructors leaves no process.
  return {"/usr/bin/timeout", "300",
          "/usr/bin/python3", std::string(SLUICE_SOURCE_DIR) + "/tests/support/openai_upstream.py",
          "--record",         record.string(),
          "--delay-ms",       std::to_string(s.delay_ms),
          "--chunks",         std::to_string(s.chunks)};
}

std::uint64_t number(const boost::json::object& o, std::string_view key) {
  const auto* v = o.if_contains(key);
  return v && v->is_int64() ? static_cast<std::uint64_t>(v->as_int64()) : 0;
}

}  // namespace

openai_upstream::openai_upstream(const std::filesystem::path& dir, settings s)
    : record_(dir / "openai-charges.jsonl"),
      child_(command(record_, s), dir / "openai-upstream.out", dir / "openai-upstream.err") {
  static const std::regex line(R"(port (\d+))");
  (void)eventually(
      [&] {
        std::smatch m;
        const auto out = child_.out();
        if (std::regex_search(out, m, line)) {
          port_ = static_cast<std::uint16_t>(std::stoul(m[1]));
          return true;
        }
        return !child_.running();
      },
      std::chrono::seconds(10));
  if (port_ != 0) return;
  throw std::runtime_error("openai_upstream.py did not start: " + child_.err());
}

std::string openai_upstream::url() const {
  return "http://127.0.0.1:" + std::to_string(port_);
}

std::vector<openai_charge> openai_upstream::charges() const {
  std::vector<openai_charge> out;
  std::ifstream in(record_);
  std::string text;
  while (std::getline(in, text)) {
    if (text.empty()) continue;
    boost::json::error_code ec;
    const auto v = boost::json::parse(text, ec);
    if (ec || !v.is_object()) break;  // a line being written: read it next time
    const auto& o = v.as_object();
    openai_charge c;
    c.n = number(o, "n");
    if (const auto* id = o.if_contains("id"); id && id->is_string()) c.id = id->as_string();
    c.stream = o.contains("stream") && o.at("stream") == true;
    c.prompt_tokens = number(o, "prompt_tokens");
    c.completion_tokens = number(o, "completion_tokens");
    c.total_tokens = number(o, "total_tokens");
    c.usage_sent = o.contains("usage_sent") && o.at("usage_sent") == true;
    c.in_flight = number(o, "in_flight");
    if (o.contains("status")) c.status = static_cast<unsigned>(number(o, "status"));
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<openai_charge> openai_upstream::wait_charges(std::size_t n,
                                                         std::chrono::milliseconds limit) const {
  std::vector<openai_charge> got;
  (void)eventually([&] { return (got = charges()).size() >= n; }, limit);
  return got;
}

std::uint64_t openai_upstream::total_charged() const {
  std::uint64_t sum = 0;
  for (const auto& c : charges()) sum += c.total_tokens;
  return sum;
}

std::optional<int> openai_upstream::stop() {
  child_.signal(SIGTERM);
  if (auto status = child_.wait_exit(std::chrono::seconds(2))) return status;
  child_.signal(SIGKILL);
  return child_.wait_exit(std::chrono::seconds(2));
}

std::string chat_request(std::string_view content, bool stream, bool include_usage,
                         unsigned max_tokens) {
  boost::json::object body{
      {"model", "test-model"},
      {"messages", boost::json::array{boost::json::object{{"role", "user"}, {"content", content}}}},
      {"max_tokens", max_tokens}};
  if (stream) {
    body["stream"] = true;
    body["stream_options"] = boost::json::object{{"include_usage", include_usage}};
  }
  return boost::json::serialize(body);
}

}  // namespace sluice::test
