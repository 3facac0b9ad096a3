-- ARGV: ns, map_id, kind, where, start, scan_step
-- Where are a map's tasks? Looks at one list window or one lease hash per call (bounded
-- work: `step` items at most); the client walks every place in calls like this one.
-- kind 'list': LRANGE key start..start+step-1, the 4-byte indices of the map's frames
-- (task or result frames: both start with map id and index; a partial's, every index it covers,
-- in a results list or a map's pool of partials);
-- kind 'lease': the worker's lease entries of the map held by its live incarnation
-- (an entry of another incarnation is stale: not "somewhere"); a partial leased to a merger
-- stands for every task it covers.
-- Arguments: ns, map id, kind, key or worker name, start, step.
-- Returns {next start or -1 when done, indices...}.
local mid, kind, where, start, step = ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6])
local out = {-1}
if kind == 'lease' then
  local live = redis.call('GET', K.incarnation(where))
  local flat = redis.call('HGETALL', K.lease(where))
  for i = 1, #flat, 2 do
    if tid_map(flat[i]) == mid and lease_inc(flat[i + 1]) == live then
      if is_partial_id(flat[i]) then            -- a partial leased to a merger: every task it covers
        item_indices(lease_frame(flat[i + 1]), out)
      else
        out[#out + 1] = tid_index(flat[i])
      end
    end
  end
  return out
end
local items = redis.call('LRANGE', where, start, start + step - 1)
for _, item in ipairs(items) do
  if frame_map(item) == mid then
    out[#out + 1] = string.sub(item, IDX_FROM, IDX_TO)
    if string.byte(item, STATUS_AT) == STATUS_MERGED then item_indices(item, out) end
  end
end
if #items == step then out[1] = start + step end
return out
