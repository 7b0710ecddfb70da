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

}  // namespace sluice::limiter
