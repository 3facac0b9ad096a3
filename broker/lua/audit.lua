-- Where are a map's tasks? Returns the 4-byte indices of every task of map ARGV[2]
-- that is queued (shared or a worker's queue), leased, dead-lettered or has a result
-- waiting. The client requeues pending tasks that are nowhere, twice in a row.
-- ARGV: namespace, map id
local ns, mid = ARGV[1], ARGV[2]
local seen = {}
local function scan(list)
  for _, item in ipairs(redis.call('LRANGE', list, 0, -1)) do
    if string.sub(item, 36, 51) == mid then seen[#seen + 1] = string.sub(item, 52, 55) end
  end
end
scan(ns .. ':q:shared')
scan(ns .. ':dead:' .. mid)
for _, item in ipairs(redis.call('LRANGE', ns .. ':res:' .. mid, 0, -1)) do
  seen[#seen + 1] = string.sub(item, 52, 55)
end
for _, w in ipairs(redis.call('SMEMBERS', ns .. ':workers')) do
  scan(ns .. ':q:w:' .. w)
  for _, tid in ipairs(redis.call('HKEYS', ns .. ':lease:' .. w)) do
    if string.sub(tid, 1, 16) == mid then seen[#seen + 1] = string.sub(tid, 17, 20) end
  end
end
return seen
