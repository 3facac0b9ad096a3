-- ARGV: ns, worker, incarnation, status, lease_ms, duties_ms, holds_ttl, full
-- The heartbeat of an incarnation that holds its name (claim.lua claims it): renew the
-- name and publish the status, unless another incarnation holds the name. The lightest
-- script of all, since every worker runs it every second (a thousand idle workers: a
-- thousand calls a second): six arguments, two or three writes.
-- The worker's entry in the workers set and the expiry of its holds set are renewed on a
-- `full` beat (the worker sends one every FULL_BEAT s, broker/leases.py) and whenever the
-- name had expired (the reaper may have dropped the entry meanwhile).
-- Arguments: ns, worker, incarnation, status JSON, lease ms, duties ms, holds ttl (s), full (1/0).
-- duties ms > 0: also tell whether the pool's periodic duties are due (their throttle keys
-- set here, not in a round trip each): reaping (+1) and sweeping the maps of dead clients
-- (+2), both at most once per duties ms across the pool.
-- Returns {1, 0, duties due, entries in the worker's lease} or {0, holder incarnation}: a
-- worker whose lease is empty has nothing to reconcile (worker/supervisor.py skips it).
local w, inc, ms = ARGV[2], ARGV[3], tonumber(ARGV[5])
local holder = redis.call('GET', K.incarnation(w))
if holder and holder ~= inc then return {0, holder} end
redis.call('SET', K.incarnation(w), inc, 'PX', ms)
redis.call('SET', K.heartbeat(w), ARGV[4], 'PX', ms)
if ARGV[8] == '1' or not holder then
  redis.call('SADD', K.workers(), w)
  redis.call('EXPIRE', K.holds(w), ARGV[7])
end
local every, due = tonumber(ARGV[6]), 0
if every > 0 then
  if redis.call('SET', K.reap_due(), '1', 'NX', 'PX', every) then due = 3 end   -- (one throttle for both)
end
return {1, 0, due, redis.call('HLEN', K.lease(w))}
