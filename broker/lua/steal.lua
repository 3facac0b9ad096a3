-- An idle worker takes one task from the tail of another worker's queue, and leases it
-- to itself, when that pays: the victim is backed up (at least ARGV[3] tasks queued, so
-- the owner would reach the tail much later than the thief can re-read it) or stuck
-- (its current task has run more than ARGV[4] seconds), or it is dead (no heartbeat).
-- A short queue of an owner that is making progress is left alone: those chunks are in
-- its cache. ARGV: namespace, thief name, min queue, stuck seconds.
-- Returns the frame, or false.
local ns, me = ARGV[1], ARGV[2]
local minq, stuck = tonumber(ARGV[3]), tonumber(ARGV[4])
local best, bestlen = nil, 0
for _, w in ipairs(redis.call('SMEMBERS', ns .. ':workers')) do
  if w ~= me then
    local l = redis.call('LLEN', ns .. ':q:w:' .. w)
    if l > 0 then
      local ok = l >= minq
      if not ok then
        local hb = redis.call('GET', ns .. ':hb:' .. w)
        if not hb then
          ok = true
        else
          local status = cjson.decode(hb)
          ok = type(status['task_seconds']) == 'number' and status['task_seconds'] > stuck
        end
      end
      if ok and l > bestlen then best, bestlen = w, l end
    end
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
