-- Remove every queued task of one map (cancel): from the shared queue and from every
-- worker's own queue. ARGV: namespace, map id. Returns how many were removed.
local ns, mid = ARGV[1], ARGV[2]
local removed = 0
local function purge(q)
  local items = redis.call('LRANGE', q, 0, -1)
  local keep = {}
  for _, item in ipairs(items) do
    if string.sub(item, 36, 51) == mid then removed = removed + 1 else keep[#keep + 1] = item end
  end
  if #keep < #items then
    redis.call('DEL', q)
    for i = 1, #keep, 1000 do
      redis.call('RPUSH', q, unpack(keep, i, math.min(i + 999, #keep)))
    end
  end
end
purge(ns .. ':q:shared')
for _, w in ipairs(redis.call('SMEMBERS', ns .. ':workers')) do purge(ns .. ':q:w:' .. w) end
return removed
