// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// Concurrency limits (`algorithm: concurrency`): at most `max_in_flight` requests of one key
/// in flight at once, across every gateway sharing the store. This is the reference that
/// `lua/concurrency.lua` mirrors operation for operation; the table test
/// (tests/unit/store/concurrency_table_test.cpp) holds the memory store and the script to one
/// table.
///
/// A key's state is its set of held slots: a slot id (chosen by the gateway, unique per
/// request: instance, worker, counter) and the slot's expiry in ms of store time. A slot whose
/// expiry is at or before `now` is not held (it is dropped as it is read): so the slots of a
/// gateway that died come back `slot_ttl` after their last renewal. In Redis the set is a
/// sorted set at the bucket's own key (member = slot id, score = expiry), never a hash field.
///
/// Parameters (bucket_params): window_limit = max_in_flight (N), window_ms = slot_ttl (T).
/// Outcomes (DESIGN.md, "Headers and bodies", read for slots):
/// - Limit = N; Remaining = N − slots held after the decision (never below 0);
/// - Reset = until the latest held slot expires (0 when none is held): when every slot would be
///   free if no holder renewed, an upper bound while holders end their requests;
/// - Retry-After (refused) and next (Remaining < N) = until the earliest held slot expires,
///   at most `slot_estimate_ms` (1 s): a slot frees when some request ends, which no store
///   knows ahead, so this is an estimate — a retry after it may be refused again.

#include "sluice/limiter/check.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace sluice::limiter {

/// The most a concurrency Retry-After (and RateLimit `t`) says, in ms: see the file comment.
inline constexpr std::int64_t slot_estimate_ms = 1000;

/// One held slot: the id a gateway gave it and its expiry (ms of store time).
struct held_slot {
  std::string id;
  std::int64_t expires_ms = 0;
};

/// A key's slots, in the order they were taken.
using slot_set = std::vector<held_slot>;

/// Drops the slots that expired at `now_ms` (expiry <= now), as the script's read does.
void expire_slots(slot_set& slots, std::int64_t now_ms);

/// Whether live `slots` hold slot `id`.
bool holds_slot(const slot_set& slots, const std::string& id);

/// Whether a check of limit `l` (op acquire) admits against live `slots`: the request holds
/// its slot already, or fewer than max_in_flight are held. Release and renew always admit
/// in the sense of never refusing a request; their limit_outcome::admits says whether the
/// slot was held (see apply_slot_op).
bool slots_admit(const slot_set& slots, const limit_check& l);

/// Applies `l.op` to live `slots` at `now_ms`: acquire takes `l.slot` with expiry now + T when
/// `debit` and it is not held already; release removes it; renew sets a held slot's expiry to
/// now + T (an expired slot is not brought back). Returns whether the slot was held before
/// (release, renew) or is held after (acquire).
bool apply_slot_op(slot_set& slots, const limit_check& l, bool debit, std::int64_t now_ms);

/// The outcome of a concurrency limit whose live slots after the decision are `after`, at
/// `now_ms`; `admits` as the check decided (acquire) or apply_slot_op returned (release,
/// renew); `before` the live slots the decision read (for Retry-After).
limit_outcome describe_slots(const slot_set& before, const slot_set& after, const bucket_params& p,
                             std::int64_t now_ms, bool admits);

/// The time the state must be kept, in ms from `now_ms`: until its latest slot expires; 0
/// when no slot is held (the key is deleted).
std::int64_t slots_ttl_ms(const slot_set& after, std::int64_t now_ms);

}  // namespace sluice::limiter
