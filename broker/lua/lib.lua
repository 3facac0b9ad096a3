-- Shared steps of the scripts (after the generated constants and key builders).

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Since when (ms) has the broker refused no command and not restarted, as far as the
-- reapers have looked (K.refusals(): its run id, its count of refusals, that time)? A
-- refusal is an error whose code is in REFUSALS (OOM, READONLY, LOADING, BUSY...: while
-- Redis answers these, heartbeats are refused too), counted by Redis in INFO errorstats.
-- Returns now, since.
local function broker_refused_since(ttl_ms)
  local now = now_ms()
  local run = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)') or ''
  local count = 0
  for code, n in string.gmatch(redis.call('INFO', 'errorstats'), 'errorstat_(%u+):count=(%d+)') do
    if REFUSALS[code] then count = count + tonumber(n) end
  end
  local got = redis.call('HMGET', K.refusals(), 'run', 'count', 'since')
  local since = tonumber(got[3]) or 0
  if got[1] and (got[1] ~= run or tonumber(got[2]) ~= count) then since = now end
  redis.call('HSET', K.refusals(), 'run', run, 'count', count, 'since', since)
  redis.call('PEXPIRE', K.refusals(), ttl_ms)
  return now, since
end

local function is_task(f)
  return #f >= TASK_MIN_LEN and string.sub(f, 1, #MAGIC) == MAGIC
end

local function frame_map(f) return string.sub(f, MAP_FROM, MAP_TO) end
local function frame_tid(f) return string.sub(f, MAP_FROM, IDX_TO) end
local function tid_map(tid) return string.sub(tid, 1, MAP_ID_LEN) end
local function tid_index(tid) return string.sub(tid, MAP_ID_LEN + 1, TID_LEN) end
local function tid_number(tid)             -- a task id's index (uint32 BE) as a number
  local a, b, c, d = string.byte(tid, MAP_ID_LEN + 1, TID_LEN)
  return ((a * 256 + b) * 256 + c) * 256 + d
end

-- lease values: incarnation | taken-at ms (zero-padded) | frame; one script call takes
-- its tasks at one instant, so it builds the prefix once
local function lease_prefix(inc)
  return inc .. string.format('%0' .. TIME_LEN .. 'd', now_ms())
end
local function lease_inc(v) return string.sub(v, 1, INC_LEN) end
local function lease_ms(v) return tonumber(string.sub(v, INC_LEN + 1, INC_LEN + TIME_LEN)) or 0 end
local function lease_frame(v) return string.sub(v, INC_LEN + TIME_LEN + 1) end

-- A map whose client died: delete its keys (its backlog of queued tasks with them) and
-- its registry entry; its tasks left in other queues are dropped by whoever pops them.
-- The blob key a stub names (broker/wire/blobs.py: a big result's head as a frame's, a partial's
-- covered indices too, then the frame's length (8 bytes) and the key), or nil for a frame.
local function stub_key(item)
  if string.sub(item, 1, #BLOB_MAGIC) ~= BLOB_MAGIC then return nil end
  local n = STATUS_AT
  if string.byte(item, STATUS_AT) == STATUS_MERGED then
    local b1, b2, b3, b4 = string.byte(item, STATUS_AT + 1, STATUS_AT + 4)
    n = n + 4 + 4 * (((b1 * 256 + b2) * 256 + b3) * 256 + b4)
  end
  local key = string.sub(item, n + 9)
  if string.sub(key, 1, #NS + 6) ~= NS .. ':blob:' then return nil end
  return key
end

-- The tree of partials (broker/wire/merge.py). A result frame or stub stands for one task, a
-- partial's (status MERGED) for every task it covers: its count, then their indices.
local function u32(s, at)
  local b1, b2, b3, b4 = string.byte(s, at, at + 3)
  return ((b1 * 256 + b2) * 256 + b3) * 256 + b4
end
local function item_count(item)
  if string.byte(item, STATUS_AT) == STATUS_MERGED and #item >= STATUS_AT + 4 then return u32(item, STATUS_AT + 1) end
  return 1
end
-- Append the 4-byte indices of the tasks `item` stands for to `out`.
local function item_indices(item, out)
  if string.byte(item, STATUS_AT) == STATUS_MERGED and #item >= STATUS_AT + 4 then
    for j = 0, u32(item, STATUS_AT + 1) - 1 do
      local at = STATUS_AT + 5 + 4 * j
      out[#out + 1] = string.sub(item, at, at + 3)
    end
  else
    out[#out + 1] = string.sub(item, IDX_FROM, IDX_TO)
  end
  return out
end
-- A partial leased to a merger is a lease entry like a task's: its field the map id and
-- an index with the top bit set (a task's index never has it: broker/wire/merge.py), its value
-- the partial's frame or stub.
local function is_partial_id(id) return string.byte(id, MAP_ID_LEN + 1) >= 128 end
local function new_partial_id(mid)
  local seq = redis.call('HINCRBY', K.map(mid), MAP_PARTIAL_SEQ, 1) % 2147483648
  return mid .. string.char(128 + math.floor(seq / 16777216), math.floor(seq / 65536) % 256,
                            math.floor(seq / 256) % 256, seq % 256)
end
-- Keep `key` as long as map `mid` lives, and `keep` s more.
local function keep_with_map(key, mid, keep)
  redis.call('EXPIRE', key, math.max(redis.call('TTL', K.map(mid)), 1) + keep)
end
-- Add `member` to `key`, an index of map `mid` (K.map_routed, K.map_leased: broker/wire/keys.py),
-- in the step that puts a task or partial of the map where the index points. Owned by the map:
-- it lives as the map (its client renews it with the map's other keys, which it goes with).
-- A map that ended (its keys deleted; its signed end still in K.live, so its queued frames
-- are still taken, to be refused) gets no index back: nothing of it stays after its end.
local function index_add(key, mid, member)
  if redis.call('EXISTS', K.map(mid)) == 0 then return end
  if redis.call('SADD', key, member) == 1 then keep_with_map(key, mid, 0) end
end
-- Whether the live map `mid` merges no more in the tree (its mergers died MERGER_DEATHS
-- times with partials in hand: broker/wire/merge.py).
local function tree_off(mid)
  return (tonumber(redis.call('HGET', K.map(mid), MAP_MERGER_DEATHS)) or 0) >= MERGER_DEATHS
end
-- A worker (or its task process) died holding the lease entries `flat` (HGETALL, field
-- and value in turns; `inc`: only those of that incarnation, nil: all): each live map
-- whose partials it held as a merger counts one merger death (tree_off).
local function mergers_died(flat, inc)
  local died = {}
  for i = 1, #flat, 2 do
    local mid = tid_map(flat[i])
    if is_partial_id(flat[i]) and not died[mid] and (inc == nil or lease_inc(flat[i + 1]) == inc)
        and redis.call('EXISTS', K.map(mid)) == 1 then
      died[mid] = true
      redis.call('HINCRBY', K.map(mid), MAP_MERGER_DEATHS, 1)
    end
  end
end
-- Give `item`, a partial of the live map `mid`, to the map's pool (for a merger).
local function pool_partial(mid, item, keep)
  redis.call('RPUSH', K.pool(mid), item)
  keep_with_map(K.pool(mid), mid, keep)
  local blob = stub_key(item)
  if blob then keep_with_map(blob, mid, keep) end
  redis.call('HINCRBY', K.map(mid), MAP_POOLED, item_count(item))
end
-- The live map `mid`'s pool goes to its client whole; returns how many tasks it covers.
local function pool_to_client(mid, keep)
  local pool, res, moved = K.pool(mid), K.results(mid), 0
  while true do
    local item = redis.call('LMOVE', pool, res, 'LEFT', 'RIGHT')
    if not item then break end
    moved = moved + item_count(item)
    local blob = stub_key(item)
    if blob then keep_with_map(blob, mid, keep) end
  end
  keep_with_map(res, mid, keep)
  if moved > 0 then              -- (Redis refuses an increment of -0: 'value is not an integer')
    redis.call('HINCRBY', K.map(mid), MAP_POOLED, -moved)
    redis.call('HINCRBY', K.map(mid), MAP_ANSWERED, moved)
  end
  return moved
end
-- `k` tasks of the live map `mid` were answered (their results handed in, or dead). Once
-- the pool's partials cover every task not answered, no merger will come for them: the
-- pool goes to the client whole (so the end of a map waits for no timer).
local function answered(mid, k, keep)
  redis.call('HINCRBY', K.map(mid), MAP_ANSWERED, k)
  if redis.call('LLEN', K.pool(mid)) == 0 then return end
  local got = redis.call('HMGET', K.map(mid), MAP_TASKS, MAP_ANSWERED, MAP_POOLED)
  if (tonumber(got[2]) or 0) + (tonumber(got[3]) or 0) >= (tonumber(got[1]) or 0) then pool_to_client(mid, keep) end
end
-- Hand `items` (result frames, partials', or stubs) of map `mid` to its client, in order,
-- with one push and one count for all; false (nothing done) when the map is gone.
local function deliver_all(mid, items, keep)
  local left = redis.call('TTL', K.map(mid))
  if left == -2 then return false end
  local res, until_, k = K.results(mid), math.max(left, 1) + keep, 0
  for lo = 1, #items, 500 do
    redis.call('RPUSH', res, unpack(items, lo, math.min(#items, lo + 499)))
  end
  redis.call('EXPIRE', res, until_)
  for _, item in ipairs(items) do
    local blob = stub_key(item)
    if blob then redis.call('EXPIRE', blob, until_) end
    k = k + item_count(item)
  end
  answered(mid, k, keep)
  return true
end
local function deliver(mid, item, keep) return deliver_all(mid, {item}, keep) end

-- Delete the blobs of a map's unread results and pooled partials (their stubs are in its
-- results list and its pool), each list read a thousand items at a time.
local function drop_blobs(mid)
  for _, list in ipairs({K.results(mid), K.pool(mid)}) do
    local at = 0
    while true do
      local items = redis.call('LRANGE', list, at, at + 999)
      for _, item in ipairs(items) do
        local key = stub_key(item)
        if key then redis.call('UNLINK', key) end
      end
      if #items < 1000 then break end
      at = at + 1000
    end
  end
end

-- `keep_end`: its client ended it and signed the end in its token's place (the `live` key,
-- which expires when its last token could: the workers that take a copy of its frames
-- meanwhile see the end, say so, and remember it)
local function drop_map(mid, keep_end)
  drop_blobs(mid)
  redis.call('UNLINK', unpack(map_keys(mid, keep_end)))  -- a long backlog is freed in the background
  redis.call('ZREM', K.maps(), mid)
end

-- Is the client of map `mid` gone? Its beacon expired while the broker said yes for a
-- whole beacon's life: a broker that refused writes (or restarted) refused the beacon's
-- renewals too, so its maps live on until a beacon's life has passed without refusals.
local function client_gone(mid)
  local got = redis.call('HMGET', K.map(mid), MAP_CLIENT, MAP_CLIENT_TTL)
  if not got[1] or redis.call('EXISTS', K.client(got[1])) == 1 then return false end
  local cttl = tonumber(got[2]) or 10000
  local t, since = broker_refused_since(math.max(2 * cttl, 60000))
  return t - since >= cttl
end

-- The map's signed liveness token (the worker verifies it), or false when the map is
-- gone or its client died (the map is then dropped). One look per map per script call.
-- What one call knows: a function library (broker/functions.py) keeps its top level
-- between calls, so every script starts with begin(its namespace) and nothing is memoised
-- across calls (a token read once must not be served to a later call).
local tokens                              -- map id -> its token (or false), read once a call
local function begin(ns)
  NS = ns
  tokens = {}
end
local function map_token(mid)
  local known = tokens[mid]
  if known ~= nil then return known end
  local token = redis.call('GET', K.live(mid))
  if token and client_gone(mid) then
    drop_map(mid)
    token = false
  end
  tokens[mid] = token
  return token
end

-- A task of map `mid` left the shared queue: the next task of its backlog takes its place
-- at the back of the shared queue (so each map keeps at most its window there: maps
-- take turns).
local function refill(mid)
  redis.call('LMOVE', K.backlog(mid), K.shared_queue(), 'RIGHT', 'LEFT')
end

-- Put a leased task back in the shared queue. With a reason (`why` ~= '') the run counts
-- as an attempt: it is noted in the map's history and, once the task has used up
-- `maxtries` attempts, the task goes to the map's dead list instead (the retry policy,
-- in one place). Tasks of maps that are gone are dropped. A partial leased to a merger
-- goes back to its map's pool (never an attempt: its tasks ran). Returns REQUEUED_QUEUED, _DEAD or _GONE
-- (messages.Requeued).
local function requeue(tid, frame, why, maxtries, ttl)
  local mid = tid_map(tid)
  if redis.call('EXISTS', K.map(mid)) == 0 then
    local blob = is_partial_id(tid) and stub_key(frame)
    if blob then redis.call('DEL', blob) end
    return REQUEUED_GONE
  end
  if is_partial_id(tid) then            -- a partial its merger did not hand up: merged again
    if tree_off(mid) then               -- (its mergers keep dying: broker/wire/merge.py's MERGER_DEATHS)
      deliver(mid, frame, ttl)
    else
      pool_partial(mid, frame, ttl)
      answered(mid, 0, ttl)             -- (or the client's, if no merger will come)
    end
    return REQUEUED_QUEUED
  end
  if why ~= '' then
    local idx = tid_index(tid)
    local n = redis.call('HINCRBY', K.attempts(mid), idx, 1)
    redis.call('EXPIRE', K.attempts(mid), ttl)
    redis.call('HSET', K.tries(mid), idx, (redis.call('HGET', K.tries(mid), idx) or '') .. why .. '\n')
    redis.call('EXPIRE', K.tries(mid), ttl)
    if n >= maxtries then
      redis.call('RPUSH', K.dead(mid), frame)
      redis.call('EXPIRE', K.dead(mid), ttl)
      answered(mid, 1, ttl)
      return REQUEUED_DEAD
    end
  end
  redis.call('RPUSH', K.shared_queue(), frame)
  return REQUEUED_QUEUED
end

-- Requeue every lease entry of worker `w` (why: '' = never run, not an attempt).
local function requeue_lease(w, why, maxtries, ttl)
  local lease = K.lease(w)
  local flat = redis.call('HGETALL', lease)
  if why ~= '' then mergers_died(flat) end
  for i = 1, #flat, 2 do
    requeue(flat[i], lease_frame(flat[i + 1]), why, maxtries, ttl)
  end
  redis.call('DEL', lease)
  return #flat / 2
end

-- Move up to `step` tasks from worker `w`'s own queue to the shared queue; returns how
-- many are left there (bounded work per call: callers loop).
local function drain_queue(w, step)
  local q = K.queue(w)
  for _ = 1, step do
    if not redis.call('LMOVE', q, K.shared_queue(), 'RIGHT', 'RIGHT') then return 0 end
  end
  return redis.call('LLEN', q)
end

-- Is worker `w` registered with a live incarnation?
local function is_live(w)
  return redis.call('SISMEMBER', K.workers(), w) == 1 and redis.call('EXISTS', K.incarnation(w)) == 1
end

-- An idle worker takes one task from the tail of another worker's queue, and leases it
-- to itself, when that pays: the victim is backed up (at least `minq` tasks queued, so
-- the owner would reach the tail much later than the thief can re-read it) or stuck
-- (its current task has run more than `stuck` seconds), or it is dead (no incarnation).
-- A short queue of an owner that is making progress is left alone: those chunks are in
-- its cache. So is a task queued for the worker that holds its chunk (its bit set in the
-- map's `pinned` bitmap by the enqueue): on a thief it costs the file's opening and reads
-- where its owner serves it from memory, several times its warm run, so it is taken from
-- a live owner that makes progress only when that owner has `homeq` tasks queued.
-- Work: one LLEN per worker whose queue may hold tasks (the `routed` set: an
-- idle pool of a thousand workers costs one SMEMBERS of an empty set per take, not a
-- thousand LLENs), at most `step` pops. A name whose queue is empty, or that is no longer
-- registered, leaves the set here.
-- Returns frame, the map's token; or nil.
local function steal_one(me, inc, minq, homeq, stuck, step)
  local best, bestlen, lost = nil, 0, false
  for _, w in ipairs(redis.call('SMEMBERS', K.routed())) do
    local l = redis.call('LLEN', K.queue(w))
    if l == 0 or redis.call('SISMEMBER', K.workers(), w) == 0 then
      redis.call('SREM', K.routed(), w)
    elseif w ~= me then
      local hb, gone = redis.call('GET', K.heartbeat(w)), false
      if not hb then
        gone = true
      else
        local fine, status = pcall(cjson.decode, hb)   -- a malformed heartbeat: not stuck
        gone = fine and type(status) == 'table' and type(status[STATUS_TASK_SECONDS]) == 'number'
          and status[STATUS_TASK_SECONDS] > stuck
      end
      -- a dead or stuck owner first (all of its queue may go), then the longest queue
      if (gone or l >= minq) and ((gone and not lost) or (gone == lost and l > bestlen)) then
        best, bestlen, lost = w, l, gone
      end
    end
  end
  if not best then return nil end
  if redis.call('HLEN', K.lease(best)) == 0 and redis.call('EXISTS', K.incarnation(best)) == 1 then
    return nil  -- the owner is alive and idle: it is about to take its own work
  end
  for _ = 1, step do
    local item = redis.call('LPOP', K.queue(best))
    if not item then return nil end
    if is_task(item) then
      local mid = frame_map(item)
      local token = map_token(mid)
      if token then
        if not lost and bestlen < homeq
            and redis.call('GETBIT', K.pinned(mid), tid_number(frame_tid(item))) == 1 then
          redis.call('LPUSH', K.queue(best), item)   -- at home there: left to its owner
          return nil
        end
        redis.call('HSET', K.lease(me), frame_tid(item), lease_prefix(inc) .. item)
        index_add(K.map_leased(mid), mid, me)
        return item, token
      end
    end
  end
  return nil
end

-- A hand-in that covers several ids (20 bytes each, end to end: the tasks of a partial,
-- and the partials a merger folded into it) counts only while every one of them is still
-- leased to incarnation `inc` in `lease`: a worker whose tasks were requeued meanwhile (it
-- froze past its lease and the reaper gave them to others; a hand-in sent again after a
-- lost reply) would have them counted twice. Either way they leave the lease. Whole: the
-- blobs of the partials folded in are deleted. Refused: the partial is dropped, noted in
-- its map, and its ids still leased to `inc` go back (tasks to the shared queue, partials
-- to their pool: they never ran anywhere else, no attempt counted).
local function whole_partial(lease, inc, mid, tids, keep)
  local ids = {}
  for j = 1, #tids, TID_LEN do ids[#ids + 1] = string.sub(tids, j, j + TID_LEN - 1) end
  local vals = redis.call('HMGET', lease, unpack(ids))
  local whole = true
  for j = 1, #ids do
    if not vals[j] or lease_inc(vals[j]) ~= inc then whole = false end
  end
  for j = 1, #ids do
    if vals[j] and lease_inc(vals[j]) == inc then
      if not whole then
        requeue(ids[j], lease_frame(vals[j]), '', 0, keep)
      elseif is_partial_id(ids[j]) then
        local blob = stub_key(lease_frame(vals[j]))
        if blob then redis.call('DEL', blob) end
      end
    end
  end
  if not whole and redis.call('EXISTS', K.map(mid)) == 1 then redis.call('HINCRBY', K.map(mid), MAP_REFUSED, 1) end
  redis.call('HDEL', lease, unpack(ids))
  return whole
end
