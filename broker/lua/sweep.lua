-- ARGV: ns, every_ms, scan_step, ended...
-- Drop the maps whose client died (its beacon key expired, see client_gone in lib.lua), with their backlogs of queued
-- tasks: at most once per `every` ms per namespace (throttle key), at most `step` maps
-- of the registry looked at per call. Their tasks left in the shared or workers' queues
-- are dropped by whoever pops them (take).
-- Arguments: ns, throttle ms, step, then the ids of maps their client ended (cancelled, left
-- early, timed out, done): those are dropped now, the blobs of their unread results with
-- them, their signed ends left to expire (drop_map), and the registry is not looked at.
-- Returns, for ended maps, {id, its runs lost with their process (the `tries` hash, as
-- HGETALL: index, history...)} per map, read as they go (the client's record of the map
-- gets them in the reply of the write that ended it: no round trip on the map's return);
-- else the ids of the maps dropped.
local every, step = tonumber(ARGV[2]), tonumber(ARGV[3])
if #ARGV > 3 then
  local ended = {}
  for i = 4, #ARGV do
    ended[#ended + 1] = {ARGV[i], redis.call('HGETALL', K.tries(ARGV[i]))}
    drop_map(ARGV[i], true)
  end
  return ended
end
if every > 0 and not redis.call('SET', K.sweep_due(), '1', 'NX', 'PX', every) then return {} end
local dropped = {}
for _, mid in ipairs(redis.call('ZRANGE', K.maps(), 0, step - 1)) do
  if client_gone(mid) then
    drop_map(mid)
    dropped[#dropped + 1] = mid
  end
end
return dropped
