-- Register a map and queue its tasks; the client sends a big map in several calls of at
-- most a few thousand frames each (only the first registers the map), so no call blocks
-- Redis for long. Tasks routed to a worker that is not live (reaped between the client
-- locating it and this call) go to the shared queue: no queue without an owner.
-- Each call carries a sequence number, increasing over the client's calls: a call whose
-- number the map has already seen (`MAP_SENT`) queues nothing, so a client that lost its
-- connection before reading the replies can send the same calls again without
-- duplicating tasks (Redis runs one connection's calls in order).
-- ARGV: ns, map id, register (1/0), sequence number,
--       [only when registering: function hash, packed function or '', map ttl,
--       function ttl, start time, n info values, info field/value pairs...,
--       n finished maps, their ids... (deleted here: a client's earlier maps)],
--       then groups: routed (1/0), worker name ('' when not routed), n frames, frames...
-- Returns 1 (also for a call seen before), or 0 when a later call finds the map gone
-- (cancelled): nothing is queued.
local mid, register, seq = ARGV[2], ARGV[3] == '1', tonumber(ARGV[4])
local i = 5
if register then
  local fh, blob = ARGV[5], ARGV[6]
  local mapttl, fnttl, now = tonumber(ARGV[7]), tonumber(ARGV[8]), ARGV[9]
  if blob ~= '' then
    redis.call('SET', K['function'](fh), blob, 'EX', fnttl)
  else
    redis.call('EXPIRE', K['function'](fh), fnttl)
  end
  local ninfo = tonumber(ARGV[10])
  redis.call('HSET', K.map(mid), MAP_FN, fh, unpack(ARGV, 11, 10 + ninfo))
  redis.call('EXPIRE', K.map(mid), mapttl)
  redis.call('ZADD', K.maps(), now, mid)
  i = 11 + ninfo
  local ndel = tonumber(ARGV[i])
  for j = i + 1, i + ndel do
    local old = ARGV[j]
    redis.call('DEL', unpack(map_keys(old)))
    redis.call('ZREM', K.maps(), old)
  end
  i = i + 1 + ndel
elseif redis.call('EXISTS', K.map(mid)) == 0 then
  return 0
end
if tonumber(redis.call('HGET', K.map(mid), MAP_SENT) or 0) >= seq then return 1 end
redis.call('HSET', K.map(mid), MAP_SENT, seq)
while i <= #ARGV do
  local routed, who, count = ARGV[i] == '1', ARGV[i + 1], tonumber(ARGV[i + 2])
  local q = (routed and is_live(who)) and K.queue(who) or K.shared_queue()
  for j = i + 3, i + 2 + count, 1000 do
    redis.call('LPUSH', q, unpack(ARGV, j, math.min(j + 999, i + 2 + count)))
  end
  i = i + 3 + count
end
return 1
