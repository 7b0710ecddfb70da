// SPDX-License-Identifier: Apache-2.0
// The store's families on /metrics, made from its counter list (store/store_counters.hpp):
// every row of the list is exposed, with its HELP and TYPE, its label and its own count.
#include "sluice/observability/metrics.hpp"

#include "support/store_counts.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace sluice::observability {
namespace {

std::size_t width(std::uint64_t) {
  return 1;
}
template <std::size_t N>
std::size_t width(const std::array<std::uint64_t, N>&) {
  return N;
}
std::uint64_t at(std::uint64_t v, std::size_t) {
  return v;
}
template <std::size_t N>
std::uint64_t at(const std::array<std::uint64_t, N>& a, std::size_t k) {
  return a[k];
}
std::string label_at(const char* value, std::size_t) {
  return value;
}
std::string label_at(std::string_view (*of)(std::size_t), std::size_t k) {
  return std::string(of(k));
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(store_families, every_row_of_the_counter_list_is_exposed_with_its_count) {
  metrics_sample s;
  test::fill_counts(s.store, 100);  // every count distinct
  const std::string text = exposition(s);

  std::uint64_t above = 0;
  std::size_t rows = 0;
  auto expect = [&](const char* member, std::string family, std::string help,
                    store::exposed_as exposed, std::string label, std::size_t n, auto&& label_of,
                    auto&& count_of) {
    ++rows;
    const bool gauge = exposed == store::exposed_as::gauge;
    if (!help.empty()) {
      EXPECT_TRUE(contains(text, "# HELP " + family + " " + help + "\n")) << member;
      EXPECT_TRUE(contains(text, "# TYPE " + family + (gauge ? " gauge\n" : " counter\n")))
          << member;
    }
    for (std::size_t k = 0; k < n; ++k) {
      std::uint64_t count = count_of(k);
      if (exposed == store::exposed_as::counter_plus_above) count += above;
      const std::string sample = family +
                                 (label.empty() ? "" : "{" + label + "=\"" + label_of(k) + "\"}") +
                                 " " + std::to_string(count) + "\n";
      EXPECT_TRUE(contains(text, "\n" + sample)) << member << ": " << sample;
    }
    above = count_of(0);
  };
#define SLUICE_TEST_ROW(member, type, exposed, family, label, value, help)             \
  expect(                                                                              \
      #member, family, help, store::exposed_as::exposed, label, width(s.store.member), \
      [&](std::size_t k) { return label_at(value, k); },                               \
      [&](std::size_t k) { return at(s.store.member, k); });
  SLUICE_STORE_COUNTERS(SLUICE_TEST_ROW)
#undef SLUICE_TEST_ROW
  EXPECT_GT(rows, 20u);
}

}  // namespace
}  // namespace sluice::observability
