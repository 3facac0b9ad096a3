-- Take up to ARGV[1] tasks for one worker: its own queue first, then the shared one.
-- Each task taken is recorded in the worker's lease hash (task id -> frame) in the same
-- atomic step, so a worker killed at any instant leaves its tasks findable.
-- KEYS: own queue, shared queue, lease, own bell, shared bell
-- ARGV: max tasks, map key prefix, bell cap
-- Returns a flat list: frame, function hash, frame, function hash, ...
-- Tasks of maps that no longer exist (cancelled, abandoned) are dropped here.
-- Bytes that are not a frame are handed over with an empty hash so the worker reports them.
local out = {}
local n = tonumber(ARGV[1])
local prefix = ARGV[2]
local cap = tonumber(ARGV[3])

local function ring(q, b)
  local want = math.min(redis.call('LLEN', q), cap)
  local have = redis.call('LLEN', b)
  if have > want then
    if want == 0 then redis.call('DEL', b) else redis.call('LTRIM', b, 0, want - 1) end
  elseif have < want then
    local t = {}
    for i = 1, want - have do t[i] = '1' end
    redis.call('RPUSH', b, unpack(t))
  end
end

local function take(q, b)
  while #out < 2 * n do
    local item = redis.call('RPOP', q)
    if not item then break end
    if #item < 55 or string.sub(item, 1, 2) ~= 'RH' then
      out[#out + 1] = item
      out[#out + 1] = ''
    else
      local fn = redis.call('HGET', prefix .. string.sub(item, 36, 51), 'fn')
      if fn then
        redis.call('HSET', KEYS[3], string.sub(item, 36, 55), item)
        out[#out + 1] = item
        out[#out + 1] = fn
      end
    end
  end
  ring(q, b)
end

take(KEYS[1], KEYS[4])
if #out < 2 * n then take(KEYS[2], KEYS[5]) end
return out
