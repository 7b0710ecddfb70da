// SPDX-License-Identifier: Apache-2.0
// The API key file: parsed into a fresh map off the request path, then swapped in whole.
//
// Why a line format rather than YAML: yaml-cpp builds a node per scalar, which for 500,000
// keys costs seconds and hundreds of megabytes; a `KEY PLAN` line parser is linear, allocates
// only the map, and loads half a million keys in well under a second.

#include "sluice/config/key_file.hpp"

#include "config/file.hpp"
#include "config/text.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace sluice::config {

api_key_file::api_key_file(std::string path, std::vector<std::string> plan_names)
    : path_(std::move(path)), plan_names_(std::move(plan_names)) {
  map_.store(std::make_shared<const key_map>());
}

std::pair<std::shared_ptr<api_key_file>, std::vector<diagnostic>> api_key_file::load(
    std::string path, std::vector<std::string> plan_names) {
  auto f = std::make_shared<api_key_file>(std::move(path), std::move(plan_names));
  auto diags = f->reload();
  if (!diags.empty()) return {nullptr, std::move(diags)};
  f->reloads_.store(0);
  return {std::move(f), {}};
}

std::optional<std::string> api_key_file::find(std::string_view key) const {
  const auto map = map_.load(std::memory_order_acquire);
  auto it = map->find(key);
  if (it == map->end()) return std::nullopt;
  return it->second;
}

std::size_t api_key_file::size() const {
  return map_.load()->size();
}

std::vector<diagnostic> api_key_file::poll() {
  struct stat st {};
  file_id id;
  if (::stat(path_.c_str(), &st) == 0) {
    id.mtime_ns = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
    id.size = st.st_size;
    id.inode = st.st_ino;
  }
  if (id == seen_) return {};
  return reload();
}

std::vector<diagnostic> api_key_file::reload() {
  std::shared_ptr<const key_map> fresh;
  auto diags = read(fresh);
  if (!diags.empty()) {
    failures_.fetch_add(1);
    return diags;
  }
  map_.store(std::move(fresh), std::memory_order_release);
  reloads_.fetch_add(1);
  return {};
}

std::vector<diagnostic> api_key_file::read(std::shared_ptr<const key_map>& out) {
  std::vector<diagnostic> diags;
  std::size_t more = 0;
  auto error = [&](int line, std::string message) {
    if (diags.size() < max_diagnostics)
      diags.push_back({path_, line, "api_keys_file", std::move(message)});
    else
      ++more;
  };
  // Identify the file before reading it: a write racing the read is then seen by the next
  // poll (the identity changes again) instead of being lost.
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) {
    const int err = errno;
    seen_ = {};
    diags.push_back(
        {path_, 0, "api_keys_file", "cannot read file: " + std::string(std::strerror(err))});
    return diags;
  }
  seen_ = {static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec,
           st.st_size, static_cast<std::uint64_t>(st.st_ino)};
  std::string text;
  if (std::string why = file::read_regular(path_, max_file_bytes, text); !why.empty()) {
    diags.push_back({path_, 0, "api_keys_file", std::move(why)});
    return diags;
  }

  auto map = std::make_shared<key_map>();
  std::unordered_map<std::string_view, int> first_line;  // views into `text`
  map->reserve(text.size() / 24 + 16);
  first_line.reserve(text.size() / 24 + 16);
  auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\r'; };
  int line_no = 0;
  std::size_t pos = 0;
  while (pos < text.size()) {
    ++line_no;
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    while (!line.empty() && blank(line.front())) line.remove_prefix(1);
    while (!line.empty() && blank(line.back())) line.remove_suffix(1);
    if (line.empty() || line.front() == '#') continue;
    std::size_t k = 0;
    while (k < line.size() && !blank(line[k])) ++k;
    const std::string_view key = line.substr(0, k);
    std::string_view rest = line.substr(k);
    while (!rest.empty() && blank(rest.front())) rest.remove_prefix(1);
    std::size_t p = 0;
    while (p < rest.size() && !blank(rest[p])) ++p;
    const std::string_view plan = rest.substr(0, p);
    if (plan.empty() || p != rest.size()) {
      error(line_no, plan.empty() ? "expected 'KEY PLAN', got a key without a plan"
                                  : "expected 'KEY PLAN', got more than two fields");
      continue;
    }
    if (std::find(plan_names_.begin(), plan_names_.end(), plan) == plan_names_.end()) {
      std::string list;
      for (const auto& n : plan_names_) list += (list.empty() ? "" : ", ") + n;
      if (auto s = text::suggest(plan, plan_names_))
        error(line_no, "unknown plan '" + std::string(plan) + "'; did you mean '" + *s + "'?");
      else
        error(line_no, "unknown plan '" + std::string(plan) + "'; plans are " + list);
      continue;
    }
    auto [it, fresh] = first_line.emplace(key, line_no);
    if (!fresh) {
      // The key itself is not echoed: API keys are credentials and diagnostics reach logs.
      error(line_no, "duplicate key (first at line " + std::to_string(it->second) + ")");
      continue;
    }
    map->emplace(std::string(key), std::string(plan));
  }
  if (more > 0)
    diags.push_back({path_, 0, "api_keys_file", "and " + std::to_string(more) + " more problems"});
  if (diags.empty()) out = std::move(map);
  return diags;
}

}  // namespace sluice::config
