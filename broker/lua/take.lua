-- ARGV: ns, worker, incarnation, result_grace, max_tasks, leases, scan_step, steal_min_queue, steal_home_min_queue, steal_stuck_seconds, watch#, results...
-- Hand in a worker's results, then lease up to `n` more tasks for it: from its own queue
-- and the shared one (which comes first is a coin toss when both hold tasks, so routed
-- work cannot starve other maps' shared tasks), and when both are empty one task stolen
-- from a backed-up, stuck or dead worker (steal_one in lib.lua). Each task taken from the
-- shared queue lets the next one of its map's backlog in (refill in lib.lua: fair turns). One atomic step, one round trip per batch.
-- Each task taken is recorded in the worker's lease hash (task id -> incarnation, time,
-- frame) in the same step, so a worker killed at any instant leaves its tasks findable.
-- Results of maps that are gone are dropped, and so are their queued tasks (at most
-- `step` of them per call). Bytes that are not a frame are handed over unleased so the
-- worker reports them.
-- Arguments: ns, worker, incarnation, result grace (s), n, leases on (1/0), step,
--       steal's min queue, its min queue for a task at home, steal's stuck seconds, k,
--       k map ids (the maps of the worker's open partials), then triples: map id, task id (a partial's: the ids of the tasks it
--       covers, end to end), result frame (or a big one's stub, broker/wire/blobs.py: its blob is
--       kept with the stub or deleted with it).
-- Returns {held, broker time ms, backlogged, frame, token, frame, token, ...}; backlogged:
-- the ids, end to end, of the maps (of the k named and of the frames taken) whose backlog
-- still holds tasks: a worker whose queue ran dry hands the partials of those maps in, and
-- the others up the tree (worker/loopstate.py). held = 0 when this
-- incarnation does not hold the name (another took it over, or it expired: nothing is
-- leased then, the supervisor claims it again or stops); token = the map's signed
-- liveness token, judged by the worker against the broker time ('' for foreign bytes, and
-- for a frame whose token is the previous frame's: each token travels once per reply).
local w, inc, grace, n = ARGV[2], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
local leases, step = ARGV[6] == '1', tonumber(ARGV[7])
local minq, homeq, stuck = tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10])
local lease = K.lease(w)
local watched = {}                         -- map ids whose backlog the worker asks about
local nwatch = tonumber(ARGV[11])
for i = 12, 11 + nwatch do watched[#watched + 1] = ARGV[i] end
-- A run of plain results of one map goes in together (one HDEL, one push, one count: a
-- batch's hand-in was six commands a result); a partial, or another map's result, ends
-- the run, so everything happens in the order it was handed in.
local run_mid, run_ids, run_items = nil, {}, {}
local function drop_blobs_of(items)
  for _, item in ipairs(items) do
    local blob = stub_key(item)              -- a big result: its stub here, its frame in a blob
    if blob then redis.call('DEL', blob) end -- (a blob kept as long as its list)
  end
end
local function end_run()
  if run_mid == nil then return end
  for lo = 1, #run_ids, 500 do
    redis.call('HDEL', lease, unpack(run_ids, lo, math.min(#run_ids, lo + 499)))
  end
  if not deliver_all(run_mid, run_items, grace) then drop_blobs_of(run_items) end
  run_mid, run_ids, run_items = nil, {}, {}
end
for i = 12 + nwatch, #ARGV, 3 do
  local mid, ids, item = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  if #ids > TID_LEN then                     -- a partial: counted only whole (whole_partial in lib.lua)
    end_run()
    if not (whole_partial(lease, inc, mid, ids, grace) and deliver(mid, item, grace)) then
      drop_blobs_of({item})
    end
  else
    if mid ~= run_mid then end_run() end
    run_mid = mid
    run_ids[#run_ids + 1] = ids
    run_items[#run_items + 1] = item
  end
end
end_run()
if redis.call('GET', K.incarnation(w)) ~= inc then return {0} end
local out = {1, now_ms(), ''}
local budget = step
local prefix = leases and lease_prefix(inc)
local entries = {}                         -- lease fields and values, set in one HSET
local indexed = {}                         -- maps whose `leased` index names this worker by now
local last = false
local function take(q, shared)
  while #out < 2 * n + 3 and budget > 0 do
    budget = budget - 1
    local item = redis.call('RPOP', q)
    if not item then
      if not shared then redis.call('SREM', K.routed(), w) end  -- nothing left to steal here
      return
    end
    if not is_task(item) then
      out[#out + 1] = item
      out[#out + 1] = ''
    else
      local mid = frame_map(item)
      local token = map_token(mid)
      if token then
        watched[#watched + 1] = mid
        if shared then refill(mid) end
        if leases then
          entries[#entries + 1] = frame_tid(item)
          entries[#entries + 1] = prefix .. item
          if not indexed[mid] then
            indexed[mid] = true
            index_add(K.map_leased(mid), mid, w)
          end
        end
        out[#out + 1] = item
        out[#out + 1] = (token == last) and '' or token
        last = token
      end
    end
  end
end
if tonumber(redis.call('TIME')[2]) % 2 == 0 then
  take(K.queue(w), false)
  take(K.shared_queue(), true)
else
  take(K.shared_queue(), true)
  take(K.queue(w), false)
end
for lo = 1, #entries, 500 do
  redis.call('HSET', lease, unpack(entries, lo, math.min(#entries, lo + 499)))
end
if #out == 3 and n > 0 then
  local item, token = steal_one(w, inc, minq, homeq, stuck, step)
  if item then
    out[4], out[5] = item, token
    watched[#watched + 1] = frame_map(item)
  end
end
local seen, busy = {}, {}
for _, mid in ipairs(watched) do
  if not seen[mid] then
    seen[mid] = true
    if redis.call('LLEN', K.backlog(mid)) > 0 then busy[#busy + 1] = mid end
  end
end
out[3] = table.concat(busy)
return out
