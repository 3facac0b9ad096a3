-- Claim, take over or renew a worker name for one incarnation, and publish its status.
-- mode 'claim':  succeed only if nobody holds the name (or we already do);
-- mode 'force':  succeed if the holder is still `expected` (a holder seen to be dead);
-- mode 'renew':  the heartbeat: succeed unless another incarnation holds the name.
-- On success the name, the status and the registration are (re)set with the lease
-- expiry; a claim or take-over records the name in `joined` and requeues what a
-- predecessor left in the lease at once
-- (counted as an attempt: it died with them) and moves up to `step` tasks of its queue
-- to the shared queue.
-- ARGV: ns, worker, incarnation, status JSON, lease ms, mode, expected holder,
--       max attempts, ttl (s), why text, holds ttl (s), step, duties ms.
-- 'renew' with duties ms > 0 also tells whether the pool's periodic duties are due (their
-- throttle keys set here, not in a round trip each): reaping (+1), sweeping the maps of
-- dead clients (+2), each at most once per duties ms across the pool.
-- Returns {1, queued tasks left in its own queue, duties due} or {0, holder incarnation}.
local w, inc, status, ms, mode = ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5]), ARGV[6]
local expected, maxtries, ttl, why = ARGV[7], tonumber(ARGV[8]), tonumber(ARGV[9]), ARGV[10]
local holds_ttl, step = tonumber(ARGV[11]), tonumber(ARGV[12])
local holder = redis.call('GET', K.incarnation(w))
if holder and holder ~= inc and not (mode == 'force' and holder == expected) then
  return {0, holder}
end
redis.call('SET', K.incarnation(w), inc, 'PX', ms)
redis.call('SET', K.heartbeat(w), status, 'PX', ms)
redis.call('SADD', K.workers(), w)
redis.call('EXPIRE', K.holds(w), holds_ttl)
if mode == 'renew' then
  local every, due = tonumber(ARGV[13]) or 0, 0
  if every > 0 then
    if redis.call('SET', K.reap_due(), '1', 'NX', 'PX', every) then due = due + 1 end
    if redis.call('SET', K.sweep_due(), '1', 'NX', 'PX', every) then due = due + 2 end
  end
  return {1, 0, due}
end
-- a new incarnation: the name is recorded as having reached the broker (a keeper reads
-- it after the worker left), and whatever a predecessor held goes back now
local joined = K.joined()
redis.call('ZADD', joined, now_ms(), w)
redis.call('ZREMRANGEBYRANK', joined, 0, -JOINED_CAP - 1)
redis.call('EXPIRE', joined, JOINED_TTL)
local lease = K.lease(w)
local flat = redis.call('HGETALL', lease)
for i = 1, #flat, 2 do
  if lease_inc(flat[i + 1]) ~= inc then
    requeue(flat[i], lease_frame(flat[i + 1]), why, maxtries, ttl)
    redis.call('HDEL', lease, flat[i])
  end
end
if mode == 'force' or holder == false then
  redis.call('DEL', K.holds(w))
end
return {1, drain_queue(w, step), 0}
