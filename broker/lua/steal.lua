-- An idle worker takes one task from the tail of the longest queue of a worker that
-- is busy (holds a lease) or dead (no heartbeat), and leases it to itself.
-- ARGV: namespace, thief name. Returns the frame, or false.
local ns, me = ARGV[1], ARGV[2]
local best, bestlen = nil, 0
for _, w in ipairs(redis.call('SMEMBERS', ns .. ':workers')) do
  if w ~= me then
    local l = redis.call('LLEN', ns .. ':q:w:' .. w)
    if l > bestlen then best, bestlen = w, l end
  end
end
if not best then return false end
if redis.call('HLEN', ns .. ':lease:' .. best) == 0
   and redis.call('EXISTS', ns .. ':hb:' .. best) == 1 then
  return false  -- the owner is alive and idle: it is about to take its own work
end
while true do
  local item = redis.call('LPOP', ns .. ':q:w:' .. best)
  if not item then return false end
  if #item >= 55 and string.sub(item, 1, 2) == 'RH'
     and redis.call('EXISTS', ns .. ':map:' .. string.sub(item, 36, 51)) == 1 then
    redis.call('HSET', ns .. ':lease:' .. me, string.sub(item, 36, 55), item)
    return item
  end
end
