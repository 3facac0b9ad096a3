-- ARGV: ns, map_id, queue, scan_step
-- Remove a cancelled map's queued tasks from one queue, `step` items per call: each item
-- looked at is popped from the old end and pushed back at the new end unless it belongs
-- to the map. ARGV: ns, map id, queue key, step. Returns {removed, looked at}.
local mid, q, step = ARGV[2], ARGV[3], tonumber(ARGV[4])
local removed, seen = 0, 0
for _ = 1, step do
  local item = redis.call('RPOP', q)
  if not item then break end
  seen = seen + 1
  if frame_map(item) == mid then removed = removed + 1 else redis.call('LPUSH', q, item) end
end
return {removed, seen}
