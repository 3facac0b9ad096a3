-- ARGV: ns, worker, incarnation, status, lease_ms, mode, expected, max_attempts, result_ttl, why, holds_ttl, scan_step
-- Claim or take over a worker name for one incarnation, and publish its status (the
-- heartbeat that renews it is beat.lua).
-- mode 'claim':  succeed only if nobody holds the name (or we already do);
-- mode 'force':  succeed if the holder is still `expected` (a holder seen to be dead).
-- On success the name, the status and the registration are (re)set with the lease
-- expiry; a claim or take-over records the name in `joined` and requeues what a
-- predecessor left in the lease at once
-- (counted as an attempt: it died with them) and moves up to `step` tasks of its queue
-- to the shared queue.
-- Arguments: ns, worker, incarnation, status JSON, lease ms, mode, expected holder,
--       max attempts, ttl (s), why text, holds ttl (s), step.
-- Returns {1, queued tasks left in its own queue} or {0, holder incarnation}.
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
-- a new incarnation: the name is recorded as having reached the broker (a keeper reads
-- it after the worker left), and whatever a predecessor held goes back now
local joined = K.joined()
redis.call('ZADD', joined, now_ms(), w)
redis.call('ZREMRANGEBYRANK', joined, 0, -JOINED_CAP - 1)
redis.call('EXPIRE', joined, JOINED_TTL)
local lease = K.lease(w)
local flat = redis.call('HGETALL', lease)
local before = {}
for i = 1, #flat, 2 do
  if lease_inc(flat[i + 1]) ~= inc then before[#before + 1] = flat[i]; before[#before + 1] = flat[i + 1] end
end
if why ~= '' then mergers_died(before) end
for i = 1, #flat, 2 do
  if lease_inc(flat[i + 1]) ~= inc then
    requeue(flat[i], lease_frame(flat[i + 1]), why, maxtries, ttl)
    redis.call('HDEL', lease, flat[i])
  end
end
if mode == 'force' or holder == false then
  redis.call('DEL', K.holds(w))
end
return {1, drain_queue(w, step)}
