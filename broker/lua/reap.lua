-- Recover the tasks of dead workers (no heartbeat) or of one retiring worker.
-- Leased tasks go back to the head of the shared queue with the death noted in the
-- map's attempt history, or to the map's dead list once they used up their attempts.
-- Tasks in the worker's own queue go back to the shared queue as they are.
-- ARGV: namespace, time text, max attempts, lock ms, ttl (s), retiring worker or ''
-- Returns the names of the workers reaped.
local ns, now, maxtries = ARGV[1], ARGV[2], tonumber(ARGV[3])
local ttl, retiring = tonumber(ARGV[5]), ARGV[6]
local shared = ns .. ':q:shared'
local victims = {}
if retiring ~= '' then
  victims[1] = retiring
else
  if not redis.call('SET', ns .. ':reaper', '1', 'NX', 'PX', ARGV[4]) then return {} end
  for _, w in ipairs(redis.call('SMEMBERS', ns .. ':workers')) do
    if redis.call('EXISTS', ns .. ':hb:' .. w) == 0 then victims[#victims + 1] = w end
  end
end
for _, w in ipairs(victims) do
  local lease = ns .. ':lease:' .. w
  local flat = redis.call('HGETALL', lease)
  for i = 1, #flat, 2 do
    local tid, item = flat[i], flat[i + 1]
    local mid = string.sub(tid, 1, 16)
    if redis.call('EXISTS', ns .. ':map:' .. mid) == 1 then
      if retiring ~= '' then
        redis.call('RPUSH', shared, item)
      else
        local tries = ns .. ':tries:' .. mid
        local idx = string.sub(tid, 17, 20)
        local hist = (redis.call('HGET', tries, idx) or '') .. w .. ' stopped heartbeating at ' .. now .. ';'
        redis.call('HSET', tries, idx, hist)
        redis.call('EXPIRE', tries, ttl)
        local _, count = string.gsub(hist, ';', '')
        if count >= maxtries then
          local dead = ns .. ':dead:' .. mid
          redis.call('RPUSH', dead, item)
          redis.call('EXPIRE', dead, ttl)
        else
          redis.call('RPUSH', shared, item)
        end
      end
    end
  end
  local q = ns .. ':q:w:' .. w
  local items = redis.call('LRANGE', q, 0, -1)
  for i = 1, #items, 1000 do
    redis.call('RPUSH', shared, unpack(items, i, math.min(i + 999, #items)))
  end
  redis.call('DEL', q, lease, ns .. ':holds:' .. w)
  redis.call('SREM', ns .. ':workers', w)
end
return victims
