-- ARGV(first): ns, map_id, 1, seq, window, fn_hash, packed_fn, map_ttl, function_ttl, start, client, client_ttl_ms, info#, finished#, groups...
-- ARGV(more): ns, map_id, 0, seq, window, groups...
-- Register a map and queue its tasks; the client sends a big map in several calls of at
-- most a few thousand frames each (only the first registers the map), so no call blocks
-- Redis for long. Tasks routed to a worker that is not live (reaped between the client
-- locating it and this call) go to the shared queue: no queue without an owner.
-- Each call carries a sequence number, increasing over the client's calls: a call whose
-- number the map has already seen (`MAP_SENT`) queues nothing, so a client that lost its
-- connection before reading the replies can send the same calls again without
-- duplicating tasks (Redis runs one connection's calls in order).
-- Fair turns: a map puts at most `window` tasks into the shared queue (only while its
-- backlog is empty); the rest wait in its backlog, in order, and move in one by one as
-- its tasks are taken (refill in lib.lua). Window 0: a resubmission (tasks lost on the way
-- from the shared queue to a lease, backups): straight into the shared queue, which also
-- restores the window of the lost ones.
-- Arguments: ns, map id, register (1/0), sequence number, window,
--       [only when registering: function hash, packed function or '', map ttl,
--       function ttl, start time, client id ('' none), client ttl ms, n info values,
--       info field/value pairs..., n finished maps, their ids... (deleted here: a
--       client's earlier maps)],
--       then groups: routed (1: to a worker; 2: to the worker that holds their chunks,
--       so they are marked in the map's `pinned` bitmap: steal_one in lib.lua; 0: not
--       routed), worker name ('' when not routed), n frames, frames...
-- Returns 1 (also for a call seen before), or 0 when a later call finds the map gone
-- (cancelled): nothing is queued.
local mid, register, seq, window = ARGV[2], ARGV[3] == '1', tonumber(ARGV[4]), tonumber(ARGV[5])
local i = 6
if register then
  local fh, blob = ARGV[6], ARGV[7]
  local mapttl, fnttl, now = tonumber(ARGV[8]), tonumber(ARGV[9]), ARGV[10]
  local cid, cttl = ARGV[11], tonumber(ARGV[12])
  if blob ~= '' then
    redis.call('SET', K['function'](fh), blob, 'EX', fnttl)
  else
    redis.call('EXPIRE', K['function'](fh), fnttl)
  end
  local ninfo = tonumber(ARGV[13])
  redis.call('HSET', K.map(mid), MAP_FN, fh, unpack(ARGV, 14, 13 + ninfo))
  if cid ~= '' then
    redis.call('SET', K.client(cid), '1', 'PX', cttl)
    redis.call('HSET', K.map(mid), MAP_CLIENT, cid, MAP_CLIENT_TTL, cttl)
  end
  redis.call('EXPIRE', K.map(mid), mapttl)
  redis.call('ZADD', K.maps(), now, mid)
  i = 14 + ninfo
  local ndel = tonumber(ARGV[i])
  for j = i + 1, i + ndel do
    local old = ARGV[j]
    drop_blobs(old)
    redis.call('DEL', unpack(map_keys(old, true)))   -- its signed end left to expire (drop_map)
    redis.call('ZREM', K.maps(), old)
  end
  i = i + 1 + ndel
elseif redis.call('EXISTS', K.map(mid)) == 0 then
  return 0
end
if tonumber(redis.call('HGET', K.map(mid), MAP_SENT) or 0) >= seq then return 1 end
redis.call('HSET', K.map(mid), MAP_SENT, seq)
local backlog = K.backlog(mid)
local room = 0
if window == 0 then room = #ARGV elseif redis.call('LLEN', backlog) == 0 then room = window end
local function push(q, from, to)
  for j = from, to, 1000 do
    redis.call('LPUSH', q, unpack(ARGV, j, math.min(j + 999, to)))
  end
end
while i <= #ARGV do
  local routed, who, count = ARGV[i] ~= '0', ARGV[i + 1], tonumber(ARGV[i + 2])
  local first, last = i + 3, i + 2 + count
  if routed and is_live(who) then
    push(K.queue(who), first, last)
    redis.call('SADD', K.routed(), who)
    index_add(K.map_routed(mid), mid, who)
    if ARGV[i] == '2' then
      local pinned = K.pinned(mid)
      for j = first, last do redis.call('SETBIT', pinned, tid_number(frame_tid(ARGV[j])), 1) end
      redis.call('EXPIRE', pinned, math.max(redis.call('TTL', K.map(mid)), 1))  -- lives as the map
    end
  else
    local now = math.min(room, count)
    if now > 0 then push(K.shared_queue(), first, first + now - 1) end
    room = room - now
    if now < count then
      push(backlog, first + now, last)
      redis.call('EXPIRE', backlog, math.max(redis.call('TTL', K.map(mid)), 1))  -- lives as the map
    end
  end
  i = i + 3 + count
end
return 1
