-- Register a map and queue its tasks; the client sends a big map in several calls of at
-- most a few thousand frames each (only the first registers the map), so no call blocks
-- Redis for long. Tasks routed to a worker that is not live (reaped between the client
-- locating it and this call) go to the shared queue: no queue without an owner.
-- ARGV: ns, map id, register (1/0), [only when registering: function hash, packed function or '', map ttl,
--       function ttl, start time, n info values, info field/value pairs...,
--       n finished maps, their ids... (deleted here: a client's earlier maps)],
--       then groups: routed (1/0), worker name ('' when not routed), n frames, frames...
-- Returns 1, or 0 when a later call finds the map gone (cancelled): nothing is queued.
local mid, register = ARGV[2], ARGV[3] == '1'
local i = 4
if register then
  local fh, blob = ARGV[4], ARGV[5]
  local mapttl, fnttl, now = tonumber(ARGV[6]), tonumber(ARGV[7]), ARGV[8]
  if blob ~= '' then
    redis.call('SET', K['function'](fh), blob, 'EX', fnttl)
  else
    redis.call('EXPIRE', K['function'](fh), fnttl)
  end
  local ninfo = tonumber(ARGV[9])
  redis.call('HSET', K.map(mid), MAP_FN, fh, unpack(ARGV, 10, 9 + ninfo))
  redis.call('EXPIRE', K.map(mid), mapttl)
  redis.call('ZADD', K.maps(), now, mid)
  i = 10 + ninfo
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
while i <= #ARGV do
  local routed, who, count = ARGV[i] == '1', ARGV[i + 1], tonumber(ARGV[i + 2])
  local q = (routed and is_live(who)) and K.queue(who) or K.shared_queue()
  for j = i + 3, i + 2 + count, 1000 do
    redis.call('LPUSH', q, unpack(ARGV, j, math.min(j + 999, i + 2 + count)))
  end
  i = i + 3 + count
end
return 1
