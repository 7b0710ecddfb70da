-- SPDX-License-Identifier: Apache-2.0
-- sluice check script, part: the penalty box (`block:` of a limit). Mirrors
-- src/limiter/block.cpp and the block steps of src/store/memory_store.cpp operation for
-- operation.
--   A limit with a block (its parameter argument carries block ms) that refuses a request,
--   enforced, starts a block: from then until now + block ms the limit refuses every request
--   of that key. The block is stored beside the bucket (block_place), in the same hash slot:
--   the key `<key>:block` when the bucket is a key of its own, or the field `<field>:block` of
--   the bucket's hash; its value is pack('<d', end ms of store time), which in a hash is the
--   field's expiry stamp (get_state reads an ended block as missing; sweep deletes it). A
--   refusal during a block does not lengthen it.

local function block_place(key, field)
  if field == '' then return key .. ':block', '' end
  return key, field .. ':block'
end

-- The end (ms of store time) of the block of the bucket at (key, field), or 0 when none is in
-- force at `now`; then its place and whether something is stored there.
local function block_read(key, field, now)
  local bkey, bfield = block_place(key, field)
  local raw, at, stored = get_state(bkey, bfield, now)
  local b_end = 0
  if raw and #raw >= 8 then
    b_end = unpack_state('<d', raw)
    if b_end <= now then b_end = 0 end
  end
  return b_end, bkey, bfield, stored
end

-- Stores a block of `ms` from `now` at (bkey, bfield), or deletes what is stored there when
-- ms <= 0 (a lifted block).
local function block_write(bkey, bfield, stored, ms, now)
  put(bkey, bfield, stored, ms, now, '<d', '<d', now + ms)
end

-- A block in force for `left` ms more, applied to the limit's outcome (see apply_block in
-- src/limiter/block.cpp): remaining 0; reset, retry and next at least `left`.
local function block_apply(remaining, reset, retry, nxt, left)
  if remaining > 0 or nxt < left then nxt = left end
  if reset < left then reset = left end
  if retry < left then retry = left end
  return 0, reset, retry, nxt
end

-- Before the decision, for a limit with a block: {end, place key, place field, stored, event},
-- event 0 (none, or in force), 1 (started by this check), 2 (lifted by this check). With
-- `lift` (admin unblock) whatever is stored is deleted first, and the decision is made as if
-- no block were there.
local function block_open(key, field, now, lift)
  local b_end, bkey, bfield, stored = block_read(key, field, now)
  local blk = {b_end, bkey, bfield, stored, 0}
  if lift then
    if stored then block_write(bkey, bfield, true, 0, now) end
    blk[4] = false
    if b_end > 0 then blk[5] = 2 end
  end
  return blk
end

-- The ms the block of `blk` still holds the limit (0: none in force).
local function block_left(blk, now)
  if blk[5] == 0 and blk[1] > 0 then return blk[1] - now end
  return 0
end

-- After the decision: a limit that refused (`refused`: enforced, it did not admit, and the
-- check is no unblock) with no block in force starts one of `ms` (stored when `write`); the block in force is applied to
-- the limit's outcome, which is returned.
local function block_close(blk, ms, refused, write, now, remaining, reset, retry, nxt)
  local left = block_left(blk, now)
  if left == 0 and refused then
    blk[1] = now + ms
    blk[5] = 1
    left = ms
    if write then block_write(blk[2], blk[3], blk[4], ms, now) end
  end
  if left > 0 then remaining, reset, retry, nxt = block_apply(remaining, reset, retry, nxt, left) end
  return remaining, reset, retry, nxt
end
