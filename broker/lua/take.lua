-- Hand in a worker's results, then take up to ARGV[3] more tasks for it: its own queue
-- first, then the shared one. One atomic step, one round trip per batch.
-- Each task taken is recorded in the worker's lease hash (task id -> frame) in the same
-- step, so a worker killed at any instant leaves its tasks findable. Results of maps
-- that are gone (cancelled, abandoned) are dropped, and so are their queued tasks.
-- Bytes that are not a frame are handed to the worker (unleased) so it reports them.
-- KEYS: own queue, shared queue, lease
-- ARGV: namespace, result grace (s), max tasks, leases on (1/0), then triples: map id,
--       task id, result frame. A result list lives as long as its map (which its client
--       keeps alive) plus the grace, so results of an abandoned map expire with it.
local ns, ttl, n, leases = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4] == '1'
for i = 5, #ARGV, 3 do
  redis.call('HDEL', KEYS[3], ARGV[i + 1])
  local left = redis.call('TTL', ns .. ':map:' .. ARGV[i])
  if left ~= -2 then
    local res = ns .. ':res:' .. ARGV[i]
    redis.call('RPUSH', res, ARGV[i + 2])
    redis.call('EXPIRE', res, math.max(left, 1) + ttl)
  end
end
local out = {}
local function take(q)
  while #out < n do
    local item = redis.call('RPOP', q)
    if not item then return end
    if #item < 55 or string.sub(item, 1, 2) ~= 'RH' then
      out[#out + 1] = item
    elseif redis.call('EXISTS', ns .. ':map:' .. string.sub(item, 36, 51)) == 1 then
      if leases then redis.call('HSET', KEYS[3], string.sub(item, 36, 55), item) end
      out[#out + 1] = item
    end
  end
end
take(KEYS[1])
take(KEYS[2])
return out
