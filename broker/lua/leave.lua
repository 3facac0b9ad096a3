-- ARGV: ns, worker, now_ms, force, leaving_ttl
-- May a worker leave on its own terms? A worker at the end of its lifetime always may
-- (`force`); an idle one only while the pool keeps at least its keeper's minimum
-- (`pool_floor`) of live workers that are not leaving. A yes records the worker in
-- `leaving`; leavers whose heartbeat is gone are forgotten first.
-- Arguments: ns, worker, now ms, force ('1' or '0'), ttl of the leaving set (s).
-- Returns 1 (leave) or 0 (stay: the pool is at its floor).
local w, now, force, ttl = ARGV[2], tonumber(ARGV[3]), ARGV[4] == '1', tonumber(ARGV[5])
local leaving = K.leaving()
for _, name in ipairs(redis.call('ZRANGE', leaving, 0, -1)) do
  if redis.call('EXISTS', K.heartbeat(name)) == 0 then redis.call('ZREM', leaving, name) end
end
if not force then
  local floor = tonumber(redis.call('GET', K.pool_floor()) or '0') or 0
  local live = 0
  for _, name in ipairs(redis.call('SMEMBERS', K.workers())) do
    if redis.call('EXISTS', K.heartbeat(name)) == 1 and not redis.call('ZSCORE', leaving, name) then
      live = live + 1
    end
  end
  if live - 1 < floor then return 0 end
end
redis.call('ZADD', leaving, now, w)
redis.call('EXPIRE', leaving, ttl)
return 1
