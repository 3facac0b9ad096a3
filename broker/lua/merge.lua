-- ARGV(up): ns, 'up', worker, incarnation, result_grace, fanin, map_id, ids, frame, aside, covers
-- ARGV(drain): ns, 'drain', map_id, at_least, result_grace
-- The tree of partials (broker/wire/merge.py). Mode 'up': a worker hands its partial of a map
-- up the tree once the map has nothing left queued for it. While the map's pool holds
-- partials, the worker is given up to `fanin` - 1 of them to fold into its own (each
-- leased to it as a partial entry, so that they go back to the pool if it dies) and hands
-- up again; once the pool is empty, its partial (counted only whole: whole_partial in
-- lib.lua) goes to the pool. The last one (with the tasks answered and pooled, it covers
-- every task) goes to the client at once, and the pool's partials with it.
-- Partials of other workers that it could not fold in (`aside`: one that overlaps its own,
-- or that its reduce function refused) go to the client as they are.
-- Mode 'drain' (the client, when its map has made no progress for a while): the pool goes
-- to the client if its partials cover at least `at_least` tasks.
-- Arguments 'up': ns, 'up', worker, incarnation, grace (s), fan-in, map id, ids (20 bytes each,
--   end to end: the tasks its partial covers and the partials folded into it), item (its
--   frame or a big one's stub, set beside as in take; '' asks only for partials to fold),
--   aside ids (partial entries of this lease that go to the client as they are), how many
--   tasks its partial covers.
-- Arguments 'drain': ns, 'drain', map id, at_least, grace (s).
-- Returns {held (0: this incarnation does not hold the name; nothing done), outcome,
-- partial id, item, ...}: outcome (broker/wire/messages.py's HandedUp) INPUTS (the pairs
-- follow; the item was not taken), NONE (nothing to fold, no item), PARKED, DELIVERED,
-- REFUSED, GONE (the map ended).
-- 'drain' returns the number of tasks the partials handed to the client cover.
if ARGV[2] == 'drain' then
  local mid, at_least, grace = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
  if redis.call('EXISTS', K.map(mid)) == 0 or redis.call('LLEN', K.pool(mid)) == 0 then return 0 end
  if (tonumber(redis.call('HGET', K.map(mid), MAP_POOLED) or '0') or 0) < at_least then return 0 end
  return pool_to_client(mid, grace)
end
local w, inc, grace, fanin, mid = ARGV[3], ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7]
local ids, item, aside, covers = ARGV[8], ARGV[9], ARGV[10], tonumber(ARGV[11])
local blob = item ~= '' and stub_key(item)
if redis.call('GET', K.incarnation(w)) ~= inc then
  if blob then redis.call('DEL', blob) end
  return {0}
end
local lease = K.lease(w)
local alive = redis.call('EXISTS', K.map(mid)) == 1
for j = 1, #aside, TID_LEN do
  local pid = string.sub(aside, j, j + TID_LEN - 1)
  local v = redis.call('HGET', lease, pid)
  if v and lease_inc(v) == inc then
    redis.call('HDEL', lease, pid)
    if alive then
      deliver(mid, lease_frame(v), grace)
    else
      local b = stub_key(lease_frame(v))
      if b then redis.call('DEL', b) end
    end
  end
end
if not alive then                 -- the map ended: its partial and what it folded in are dropped
  local flat = redis.call('HGETALL', lease)
  for j = 1, #flat, 2 do
    if tid_map(flat[j]) == mid then
      redis.call('HDEL', lease, flat[j])
      local b = is_partial_id(flat[j]) and stub_key(lease_frame(flat[j + 1]))
      if b then redis.call('DEL', b) end
    end
  end
  if blob then redis.call('DEL', blob) end
  return {1, HANDED_GONE}
end
-- the last partial: with what the client has and the pool holds, it covers every task; it
-- goes to the client with the pool's partials rather than merge them first (a round less)
local got = redis.call('HMGET', K.map(mid), MAP_TASKS, MAP_ANSWERED, MAP_POOLED)
local last = (tonumber(got[2]) or 0) + (tonumber(got[3]) or 0) + (item ~= '' and item_count(item) or covers)
  >= (tonumber(got[1]) or 0)
local pool = K.pool(mid)
if tree_off(mid) then last = true end          -- (its mergers keep dying: to the client as it is)
if fanin > 1 and not last and redis.call('LLEN', pool) > 0 then
  if blob then redis.call('DEL', blob) end      -- not taken: the worker folds these in first
  local out, prefix, covered = {1, HANDED_INPUTS}, lease_prefix(inc), 0
  for _ = 1, fanin - 1 do
    local got = redis.call('LPOP', pool)
    if not got then break end
    local pid = new_partial_id(mid)
    redis.call('HSET', lease, pid, prefix .. got)
    covered = covered + item_count(got)
    out[#out + 1] = pid
    out[#out + 1] = got
  end
  if covered > 0 then redis.call('HINCRBY', K.map(mid), MAP_POOLED, -covered) end   -- (never -0)
  if #out > 2 then index_add(K.map_leased(mid), mid, w) end
  return out
end
if item == '' then return {1, HANDED_NONE} end
if not whole_partial(lease, inc, mid, ids, grace) then
  if blob then redis.call('DEL', blob) end
  return {1, HANDED_REFUSED}
end
if last then
  deliver(mid, item, grace)
  pool_to_client(mid, grace)
  return {1, HANDED_DELIVERED}
end
pool_partial(mid, item, grace)
return {1, HANDED_PARKED}
