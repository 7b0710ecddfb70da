// SPDX-License-Identifier: Apache-2.0
#include "sluice/limiter/keys.hpp"

#include <openssl/evp.h>

#include <array>

namespace sluice::limiter {
namespace {

constexpr std::size_t max_raw_value = 48;

bool is_plain(std::string_view value) {
  if (value.empty() || value.size() > max_raw_value) return false;
  for (unsigned char c : value) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// Hex of the first 16 bytes of SHA-256(value). 128 bits keep accidental collisions out of
// reach (birthday bound ~2^64 distinct values) while keeping keys short (memory per key).
std::string hashed(std::string_view value) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int len = 0;
  EVP_Digest(value.data(), value.size(), digest.data(), &len, EVP_sha256(), nullptr);
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  out.reserve(32);
  for (std::size_t i = 0; i < 16; ++i) {
    out.push_back(hex[digest[i] >> 4]);
    out.push_back(hex[digest[i] & 0xf]);
  }
  return out;
}

}  // namespace

std::string shard_value(std::string_view /*value*/, unsigned shard, unsigned variant) {
  std::string out = "shard-" + std::to_string(shard);
  if (variant > 0) out += "." + std::to_string(variant);
  return out;
}

std::string bucket_key(std::string_view limit_name, key_namespace ns, std::string_view value) {
  // Injectivity: the limit name is validated to [A-Za-z0-9_-], so '|' delimits it; the
  // namespace is one letter; the value part is either `r`+plain text or `x`+32 hex digits,
  // and the two forms cannot meet (different first letter).
  std::string key;
  key.reserve(key_prefix.size() + limit_name.size() + max_raw_value + 8);
  key.append(key_prefix);
  key.push_back('{');
  key.append(limit_name);
  key.push_back('|');
  key.push_back(static_cast<char>(ns));
  key.push_back('|');
  if (is_plain(value)) {
    key.push_back('r');
    key.append(value);
  } else {
    key.push_back('x');
    key.append(hashed(value));
  }
  key.push_back('}');
  return key;
}

namespace {

std::uint64_t fnv1a64(std::string_view text) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : text) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

// Position of the '|' before <enc> in `sl:{<limit>|<ns>|<enc>}`, or npos when `key` does not
// have that shape.
std::size_t enc_separator(std::string_view key) {
  if (key.size() < key_prefix.size() + 6 || key.substr(0, key_prefix.size()) != key_prefix ||
      key[key_prefix.size()] != '{' || key.back() != '}')
    return std::string_view::npos;
  const auto bar = key.rfind('|');
  if (bar == std::string_view::npos || bar < key_prefix.size() + 3 || bar + 2 >= key.size() ||
      key[bar - 2] != '|')
    return std::string_view::npos;
  return bar;
}

}  // namespace

store_address packed_address(std::string_view bucket_key, std::uint32_t groups) {
  const auto bar = enc_separator(bucket_key);
  if (bar == std::string_view::npos || groups == 0) return {std::string(bucket_key), {}};
  const std::string_view enc = bucket_key.substr(bar + 1, bucket_key.size() - bar - 2);
  static constexpr char hex[] = "0123456789abcdef";
  char digits[16];
  int n = 0;
  for (std::uint64_t g = fnv1a64(enc) % groups; n == 0 || g != 0; g >>= 4)
    digits[n++] = hex[g & 0xf];
  store_address out;
  out.key.reserve(bar + 3 + n);
  out.key.append(bucket_key.substr(0, bar + 1));
  out.key.push_back('#');
  while (n > 0) out.key.push_back(digits[--n]);
  out.key.push_back('}');
  out.field.assign(enc);
  return out;
}

std::string unpacked_key(std::string_view group_key, std::string_view field) {
  const auto bar = enc_separator(group_key);
  if (bar == std::string_view::npos || group_key[bar + 1] != '#') return std::string(group_key);
  std::string out(group_key.substr(0, bar + 1));
  out.append(field);
  out.push_back('}');
  return out;
}

}  // namespace sluice::limiter
