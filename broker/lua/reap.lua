-- ARGV: ns, now_text, max_attempts, every_ms, result_ttl, retiring, scan_step, lease_ms, refusals_ttl
-- Recover the tasks of dead workers (no live incarnation) or of one retiring worker.
-- Leased tasks go back to the shared queue (a death counts as an attempt, see requeue
-- in lib.lua); up to `step` tasks of the worker's own queue follow; the worker leaves the
-- workers set only once its queue is empty (the next pass goes on), so its queue is
-- never without an owner. Work per call: one EXISTS per registered worker, `step` moves.
-- A name that expired is a death only if the broker said yes all along: when it has
-- refused commands (OOM, READONLY, LOADING, BUSY, MISCONF: its own error counts) or
-- restarted (a new run id; a reloaded append-only file whose names' expiry ran on while
-- it was down) within the last lease, the live workers' heartbeats were refused too and
-- they renew their names within a heartbeat of its recovery: nobody is reaped (nor an
-- attempt counted) until a lease has passed without a refusal.
-- Arguments: ns, time text, max attempts, throttle ms (0: always), ttl (s), retiring worker
--       or '', step, lease ms, ttl of the refusals note (s).
-- Returns the names of the workers reaped.
local now, maxtries, every = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local ttl, retiring, step = tonumber(ARGV[5]), ARGV[6], tonumber(ARGV[7])
local victims = {}
if retiring ~= '' then
  victims[1] = retiring
else
  if every > 0 and not redis.call('SET', K.reap_due(), '1', 'NX', 'PX', every) then return {} end
  local t, since = broker_refused_since(tonumber(ARGV[9]) * 1000)
  if t - since < tonumber(ARGV[8]) then return {} end
  for _, w in ipairs(redis.call('SMEMBERS', K.workers())) do
    if redis.call('EXISTS', K.incarnation(w)) == 0 then victims[#victims + 1] = w end
  end
end
local budget = step
for _, w in ipairs(victims) do
  local why = (retiring ~= '') and '' or (w .. ' stopped heartbeating at ' .. now)
  requeue_lease(w, why, maxtries, ttl)
  local left = drain_queue(w, math.max(budget, 1))
  budget = budget - step
  if left == 0 then
    redis.call('DEL', K.holds(w))
    redis.call('SREM', K.workers(), w)
  end
  if retiring ~= '' then redis.call('DEL', K.heartbeat(w), K.incarnation(w)) end
end
return victims
