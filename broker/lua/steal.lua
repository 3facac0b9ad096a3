-- An idle worker takes one task from the tail of another worker's queue, and leases it
-- to itself, when that pays: the victim is backed up (at least `minq` tasks queued, so
-- the owner would reach the tail much later than the thief can re-read it) or stuck
-- (its current task has run more than `stuck` seconds), or it is dead (no incarnation).
-- A short queue of an owner that is making progress is left alone: those chunks are in
-- its cache. Work: one LLEN per registered worker, at most `step` pops.
-- ARGV: ns, thief, thief's incarnation, min queue, stuck seconds, step.
-- Returns {frame, nonce} or {}.
local me, inc = ARGV[2], ARGV[3]
local minq, stuck, step = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local best, bestlen = nil, 0
for _, w in ipairs(redis.call('SMEMBERS', K.workers())) do
  if w ~= me then
    local l = redis.call('LLEN', K.queue(w))
    if l > 0 then
      local ok = l >= minq
      if not ok then
        local hb = redis.call('GET', K.heartbeat(w))
        if not hb then
          ok = true
        else
          local status = cjson.decode(hb)
          ok = type(status[STATUS_TASK_SECONDS]) == 'number' and status[STATUS_TASK_SECONDS] > stuck
        end
      end
      if ok and l > bestlen then best, bestlen = w, l end
    end
  end
end
if not best then return {} end
if redis.call('HLEN', K.lease(best)) == 0 and redis.call('EXISTS', K.incarnation(best)) == 1 then
  return {}  -- the owner is alive and idle: it is about to take its own work
end
for _ = 1, step do
  local item = redis.call('LPOP', K.queue(best))
  if not item then return {} end
  if is_task(item) then
    local nonce = map_nonce(frame_map(item))
    if nonce then
      redis.call('HSET', K.lease(me), frame_tid(item), lease_prefix(inc) .. item)
      return {item, nonce}
    end
  end
end
return {}
