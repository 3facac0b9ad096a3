-- Register a map and queue its tasks in one atomic step.
-- ARGV: namespace, map id, function hash, packed function or '', map ttl, function ttl,
--       start time, info (flat field/value count, then pairs), then groups:
--       worker name or '' (shared queue), number of frames, frames...
-- Also deletes the keys of maps this client finished earlier (ARGV group 'DEL').
local ns, mid, fh, blob = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local mapttl, fnttl, now = tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7]
local fkey = ns .. ':fn:' .. fh
if blob ~= '' then
  redis.call('SET', fkey, blob, 'EX', fnttl)
else
  redis.call('EXPIRE', fkey, fnttl)
end
local mkey = ns .. ':map:' .. mid
local ninfo = tonumber(ARGV[8])
redis.call('HSET', mkey, 'fn', fh, unpack(ARGV, 9, 8 + ninfo))
redis.call('EXPIRE', mkey, mapttl)
redis.call('ZADD', ns .. ':maps', now, mid)
local i = 9 + ninfo
while i <= #ARGV do
  local who, count = ARGV[i], tonumber(ARGV[i + 1])
  if who == 'DEL' then
    for j = i + 2, i + 1 + count do
      local old = ARGV[j]
      redis.call('DEL', ns .. ':map:' .. old, ns .. ':res:' .. old, ns .. ':tries:' .. old, ns .. ':dead:' .. old)
      redis.call('ZREM', ns .. ':maps', old)
    end
  else
    local q = (who == '') and (ns .. ':q:shared') or (ns .. ':q:w:' .. who)
    for j = i + 2, i + 1 + count, 1000 do
      redis.call('LPUSH', q, unpack(ARGV, j, math.min(j + 999, i + 1 + count)))
    end
  end
  i = i + 2 + count
end
return 1
