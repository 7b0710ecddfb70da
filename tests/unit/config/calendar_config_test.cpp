// SPDX-License-Identifier: Apache-2.0
#include "sluice/config/loader.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

// Calendar quotas (`algorithm: calendar`, `utc_offset`) and near-limit warnings (`warn_at`)
// in a rules file: what loads, and the exact diagnostics of what does not.

namespace sluice::config {
namespace {

std::vector<std::string> diags(const std::string& yaml) {
  const load_result r = load_string(yaml, "rules.yaml");
  std::vector<std::string> out;
  for (const auto& d : r.diagnostics) out.push_back(d.to_string());
  EXPECT_EQ(r.ok(), out.empty());
  return out;
}

// A rules file whose one route has the limit `limit` (a flow mapping) at line 8.
std::string with_limit(const std::string& limit, const std::string& route_extra = "") {
  return "store: {type: memory}\n"
         "upstreams: {api: {url: http://127.0.0.1:8081}}\n"
         "routes:\n"
         "  - name: r\n"
         "    match: {path_prefix: /}\n"
         "    upstream: api\n" +
         route_extra + "    limits:\n      - " + limit + "\n";
}

TEST(calendar_config, loads_units_offsets_plans_and_warnings) {
  const load_result r = load_string(
      "store: {type: memory}\n"
      "upstreams: {api: {url: http://127.0.0.1:8081}}\n"
      "plans:\n"
      "  pro: {limits: [{name: monthly, by: api_key, algorithm: calendar, rate: 10000/month,\n"
      "                  utc_offset: \"+05:30\", warn_at: 80%,\n"
      "                  plans: {pro: {rate: 700/week}}}]}\n"
      "api_keys: {k: pro}\n"
      "routes:\n"
      "  - name: r\n"
      "    match: {path_prefix: /}\n"
      "    upstream: api\n"
      "    limits:\n"
      "      - {name: daily, by: ip, algorithm: calendar, rate: 50/day, utc_offset: \"-08:00\",\n"
      "         warn_at: 0.875}\n"
      "      - {name: tb, by: ip, rate: 10/1s, warn_at: 12.5%}\n",
      "rules.yaml");
  for (const auto& d : r.diagnostics) ADD_FAILURE() << d.to_string();
  ASSERT_TRUE(r.ok());
  const limit& m = r.value->plans.at("pro").limits.at(0);
  EXPECT_EQ(m.algorithm, algorithm::calendar);
  EXPECT_EQ(m.params.rate.count, 10000);
  EXPECT_EQ(m.params.rate.unit, calendar_unit::month);
  EXPECT_EQ(m.params.rate.period, std::chrono::hours(24 * 31));
  EXPECT_EQ(m.params.rate.utc_offset_minutes, 330);
  EXPECT_EQ(m.utc_offset_minutes, 330);
  EXPECT_EQ(m.warn_at_bp, 8000);
  const limit_params& pro = m.plan_overrides.at("pro");
  EXPECT_EQ(pro.rate.unit, calendar_unit::week);
  EXPECT_EQ(pro.rate.count, 700);
  EXPECT_EQ(pro.rate.utc_offset_minutes, 330);  // the limit's zone, in every rate
  const limit& d = r.value->routes.at(0).limits.at(0);
  EXPECT_EQ(d.params.rate.unit, calendar_unit::day);
  EXPECT_EQ(d.params.rate.utc_offset_minutes, -480);
  EXPECT_EQ(d.warn_at_bp, 8750);
  EXPECT_EQ(r.value->routes.at(0).limits.at(1).warn_at_bp, 1250);
}

struct mistake {
  const char* name;
  std::string yaml;
  std::vector<std::string> expected;
};

const std::string at = "rules.yaml:8: routes[0].limits[0]";

TEST(calendar_config, mistakes_name_file_line_and_field) {
  const std::vector<mistake> table = {
      {"plural_unit",
       with_limit("{name: q, algorithm: calendar, rate: 10000/months}"),
       {at + ".rate: rate 10000/months: a calendar quota counts per day, week or month (N/day, "
             "N/week or N/month); did you mean 10000/month?"}},
      {"fixed_duration",
       with_limit("{name: q, algorithm: calendar, rate: 10000/30d}"),
       {at + ".rate: rate 10000/30d: a calendar quota counts per day, week or month (N/day, "
             "N/week or N/month), not a fixed duration such as 30d (that is algorithm "
             "fixed_window)"}},
      {"no_unit",
       with_limit("{name: q, algorithm: calendar, rate: 10000}"),
       {at + ".rate: invalid rate '10000': a calendar quota counts per day, week or month "
             "(N/day, N/week or N/month)"}},
      {"count_not_digits",
       with_limit("{name: q, algorithm: calendar, rate: 1e4/month}"),
       {at + ".rate: rate 1e4/month: expected the count as an integer written in digits, got 1e4"}},
      {"offset_too_far_east",
       with_limit("{name: q, algorithm: calendar, rate: 10/day, utc_offset: \"+14:30\"}"),
       {at + ".utc_offset: utc_offset +14:30 is outside -14:00 .. +14:00 (the offsets in use "
             "on Earth)"}},
      {"offset_too_far_west",
       with_limit("{name: q, algorithm: calendar, rate: 10/day, utc_offset: \"-15:00\"}"),
       {at + ".utc_offset: utc_offset -15:00 is outside -14:00 .. +14:00 (the offsets in use "
             "on Earth)"}},
      {"offset_without_sign",
       with_limit("{name: q, algorithm: calendar, rate: 10/day, utc_offset: \"5:30\"}"),
       {at + ".utc_offset: invalid utc_offset '5:30': expected +HH:MM or -HH:MM, such as "
             "\"+05:30\" or \"-08:00\""}},
      {"offset_minutes",
       with_limit("{name: q, algorithm: calendar, rate: 10/day, utc_offset: \"+05:60\"}"),
       {at + ".utc_offset: invalid utc_offset '+05:60': the minutes must be 00 .. 59"}},
      {"offset_on_a_window",
       with_limit("{name: q, algorithm: fixed_window, rate: 10/1d, utc_offset: \"+01:00\"}"),
       {at + ".utc_offset: utc_offset applies only to algorithm calendar; a fixed_window limit "
             "is not aligned to local midnights"}},
      {"lease_on_a_calendar",
       with_limit("{name: q, algorithm: calendar, rate: 10/day, lease: 2}"),
       {at + ".lease: lease applies only to token_bucket; a calendar limit has no tokens to "
             "hand out ahead"}},
      {"burst_on_a_calendar",
       with_limit("{name: q, algorithm: calendar, rate: 10/day, burst: 20}"),
       {at + ".burst: burst applies only to token_bucket; a calendar limit admits the count of "
             "its rate per window"}},
      {"shards_on_a_calendar",
       with_limit("{name: q, by: global, algorithm: calendar, rate: 10/day, shards: 2}"),
       {at + ".shards: shards apply only to token_bucket; a calendar limit cannot be split into "
             "buckets of a share of the rate each"}},
      {"cost_above_the_quota",
       with_limit("{name: q, algorithm: calendar, rate: 3/week}", "    cost: 5\n"),
       {"rules.yaml:9: routes[0].limits[0].rate: cost 5 can never be admitted by rate 3/week"}},
      {"warn_at_100",
       with_limit("{name: q, rate: 10/1s, warn_at: 100%}"),
       {at + ".warn_at: warn_at 100% is outside (0 %, 100 %): a warning threshold is a share of "
             "the limit above 0 and below all of it"}},
      {"warn_at_0",
       with_limit("{name: q, rate: 10/1s, warn_at: 0}"),
       {at + ".warn_at: warn_at 0 is outside (0 %, 100 %): a warning threshold is a share of "
             "the limit above 0 and below all of it"}},
      {"warn_at_fraction_above_1",
       with_limit("{name: q, rate: 10/1s, warn_at: 1.5}"),
       {at + ".warn_at: warn_at 1.5 is outside (0 %, 100 %): a warning threshold is a share of "
             "the limit above 0 and below all of it"}},
      {"warn_at_words",
       with_limit("{name: q, rate: 10/1s, warn_at: eighty}"),
       {at + ".warn_at: invalid warn_at 'eighty': expected a percentage such as 80% (at most "
             "two decimals) or a fraction such as 0.8 (at most four)"}},
      {"warn_at_too_precise",
       with_limit("{name: q, rate: 10/1s, warn_at: 80.125%}"),
       {at + ".warn_at: invalid warn_at '80.125%': expected a percentage such as 80% (at most "
             "two decimals) or a fraction such as 0.8 (at most four)"}},
  };
  for (const auto& m : table) {
    SCOPED_TRACE(m.name);
    EXPECT_EQ(diags(m.yaml), m.expected);
  }
}

}  // namespace
}  // namespace sluice::config
