-- ARGV: ns, worker, incarnation, grace_ms, gone, crashed, why, max_attempts, result_ttl, held...
-- Check a live worker's lease against what it runs (nothing stays leased that nobody runs).
-- An entry goes back to the shared queue when it belongs to another incarnation, or when
-- it is older than `grace` ms and not among the `held` task ids (a take whose reply was
-- lost, a batch cut short by an exception): not counted as an attempt, it never ran.
-- The entry of `crashed` (a task whose process died running it) goes back counted,
-- with `why` in its history.
-- With `all` = 1 (the task process is gone) every entry not held goes back.
-- Arguments: ns, worker, incarnation, grace ms, all (1/0), crashed task id or '', why,
--       max attempts, ttl (s), then held task ids.
-- Returns {requeued, outcome of the crashed task (a messages.Requeued value, or '')}.
local w, inc, grace, all = ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5] == '1'
local crashed, why, maxtries, ttl = ARGV[6], ARGV[7], tonumber(ARGV[8]), tonumber(ARGV[9])
local held = {}
for i = 10, #ARGV do held[ARGV[i]] = true end
local lease = K.lease(w)
local now = now_ms()
local flat = redis.call('HGETALL', lease)
local n, outcome = 0, ''
if all then mergers_died(flat, inc) end    -- (a task process gone with partials it was merging)
for i = 1, #flat, 2 do
  local tid, v = flat[i], flat[i + 1]
  if tid == crashed then
    outcome = requeue(tid, lease_frame(v), why, maxtries, ttl)
    redis.call('HDEL', lease, tid)
    n = n + 1
  elseif not held[tid] and (all or lease_inc(v) ~= inc or now - lease_ms(v) > grace) then
    requeue(tid, lease_frame(v), '', maxtries, ttl)
    redis.call('HDEL', lease, tid)
    n = n + 1
  end
end
return {n, outcome}
