-- A worker hands in results: release each task's lease and append the result to its
-- map's result list, unless the map is gone (cancelled or abandoned).
-- KEYS: lease. ARGV: namespace, result ttl (s), then triples: map id, task id, frame.
local ns, ttl = ARGV[1], tonumber(ARGV[2])
for i = 3, #ARGV, 3 do
  redis.call('HDEL', KEYS[1], ARGV[i + 1])
  if redis.call('EXISTS', ns .. ':map:' .. ARGV[i]) == 1 then
    local res = ns .. ':res:' .. ARGV[i]
    redis.call('RPUSH', res, ARGV[i + 2])
    redis.call('EXPIRE', res, ttl)
  end
end
return 0
