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
-- The blob key a stub names (broker/blobs.py: a big result's head as a frame's, a partial's
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

-- Delete the blobs of a map's unread results (their stubs are in its results list), the
-- whole list read a thousand items at a time.
local function drop_blobs(mid)
  local at = 0
  while true do
    local items = redis.call('LRANGE', K.results(mid), at, at + 999)
    for _, item in ipairs(items) do
      local key = stub_key(item)
      if key then redis.call('UNLINK', key) end
    end
    if #items < 1000 then return end
    at = at + 1000
  end
end

local function drop_map(mid)
  drop_blobs(mid)
  redis.call('UNLINK', unpack(map_keys(mid)))  -- a long backlog is freed in the background
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
-- in one place). Tasks of maps that are gone are dropped. Returns REQUEUED_QUEUED, _DEAD or _GONE
-- (messages.Requeued).
local function requeue(tid, frame, why, maxtries, ttl)
  local mid = tid_map(tid)
  if redis.call('EXISTS', K.map(mid)) == 0 then return REQUEUED_GONE end
  if why ~= '' then
    local idx = tid_index(tid)
    local n = redis.call('HINCRBY', K.attempts(mid), idx, 1)
    redis.call('EXPIRE', K.attempts(mid), ttl)
    redis.call('HSET', K.tries(mid), idx, (redis.call('HGET', K.tries(mid), idx) or '') .. why .. '\n')
    redis.call('EXPIRE', K.tries(mid), ttl)
    if n >= maxtries then
      redis.call('RPUSH', K.dead(mid), frame)
      redis.call('EXPIRE', K.dead(mid), ttl)
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
        return item, token
      end
    end
  end
  return nil
end
