// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// The guarantee a limit's settings give (DESIGN.md: "Every limit states what it guarantees"),
/// computed from the config alone, for `sluice --check-config` and the admin config endpoint.
/// Each text names the worst case the accuracy harness (bench/accuracy.sh) measures, so that
/// no limit promises more than it keeps.

#include "sluice/config/rules.hpp"

#include <string>

namespace sluice::limiter {

/// The guarantee of one algorithm with one set of parameters, in one line, e.g.
/// "exact: at most 5 + 5/1m x w units in any interval w (token bucket, burst 5)". The sliding
/// window counter's names both cases the harness measures: its bound on even traffic (N + the
/// largest request cost, within 1.1x while requests cost at most N/10) and on adversarial
/// traffic (under 2x).
/// Bounds hold across any number of gateway instances sharing one store (the exact mode);
/// a route's `local` failure policy states its own share separately.
std::string guarantee(config::algorithm a, const config::limit_params& p);

/// The guarantee of a limit: its default parameters, then each plan override
/// ("; plan pro: ..."), each followed by its hot_key_caveats(), prefixed "shadow (never
/// refuses): " for `mode: shadow`, followed by charge_caveat(l), block_caveat(l) and
/// cluster_caveat(l).
std::string guarantee(const config::limit& l);

/// "" unless `l` has a `block:` (the penalty box, limiter/block.hpp): then "; penalty box
/// (block D): ..." — a key the limit refuses stays refused by it for D from that refusal,
/// exactly across instances; with region_share, in this region only.
std::string block_caveat(const config::limit& l);

/// "" unless `l` has a `charge:` (config::charge_rule): then "; ..." stating what a cost
/// known after the response does to the bound — for `when_status`, units held from admission
/// and refunded unless the status matches (never above the limit); for a settled cost, the
/// overshoot bound (requests in flight × largest cost above its reservation; none when no
/// cost exceeds its reservation) and the fallback.
std::string charge_caveat(const config::limit& l);

/// What `region_share`, `shards` and `lease` of `l` do to the guarantee of parameters `p`
/// (one of `l`'s), each as "; ..." with its bound: a region enforces its share against its
/// own store; shards never go above the limit but may refuse while another shard holds
/// tokens; leases may run ahead of the bucket by the tokens held, at most
/// lease × workers × instances units. "" when `l` uses none of them.
std::string hot_key_caveats(const config::limit& l, const config::limit_params& p);

/// "" unless `l.split_on_cluster`: then what a request decided over several hash slots of a
/// Redis Cluster can cost this limit (store/redis_cluster_store.hpp, two steps), starting
/// with "; ".
std::string cluster_caveat(const config::limit& l);

}  // namespace sluice::limiter
