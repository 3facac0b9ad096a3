-- ARGV: ns, worker, incarnation, leases, frame, from_shared
-- Lease one task that a worker popped with BRPOP (the idle worker's wake-up).
-- A task popped from the shared queue lets the next one of its map's backlog in (refill);
-- two when the shared queue is empty by now: idle workers are waiting (each wake-up is one
-- of them), so the map's window doubles with each round of wake-ups until they all have a
-- task (a thousand idle workers get their first in ~7 rounds, not 125 rounds of 8), and
-- stops growing as soon as a task is left waiting.
-- Arguments: ns, worker, incarnation, leases on (1/0), frame, popped from the shared queue (1/0).
-- Returns {the map's signed liveness token, broker time ms}; the token is '' when the map
-- is gone or its client died (the task is then dropped) or this incarnation does not hold
-- the name (the task goes back to the shared queue).
local w, inc, leases, frame = ARGV[2], ARGV[3], ARGV[4] == '1', ARGV[5]
local now = now_ms()
if not is_task(frame) then return {'', now} end
if redis.call('GET', K.incarnation(w)) ~= inc then
  redis.call('RPUSH', K.shared_queue(), frame)     -- not ours to run: back at the head
  return {'', now}
end
local mid = frame_map(frame)
local token = map_token(mid)
if not token then return {'', now} end
if ARGV[6] == '1' then
  if redis.call('LLEN', K.shared_queue()) == 0 then refill(mid) end
  refill(mid)
end
if leases then
  redis.call('HSET', K.lease(w), frame_tid(frame), lease_prefix(inc) .. frame)
  index_add(K.map_leased(mid), mid, w)
end
return {token, now}
