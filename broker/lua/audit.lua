-- ARGV(lists): ns, 'lists', map_id, scan_step, start, lists...
-- ARGV(routed): ns, 'routed', map_id, scan_step, start, workers...
-- ARGV(rest): ns, 'rest', map_id, scan_step, start, last
-- ARGV(lease): ns, 'lease', map_id, worker
-- Where are a map's tasks? The client's audit (broker/inflight.py) reads every place in the
-- order tasks move through them, so that a task moving during the audit lands where it has
-- not looked yet: the map's backlog, the queues its tasks were routed to, the shared queue,
-- then at once everything past the queues, then its dead and results lists (only this
-- client takes from those two). Every call but the one that reads past the queues looks at
-- `step` items at most; that one reads what the map has in flight (not its backlog).
-- What is reported is the 4-byte index of each of the map's frames (task or result frames:
-- both start with map id and index; a partial's, every index it covers), end to end in one
-- string (a reply of thousands of strings cost more than reading the leases).
-- Every call starts from a fresh `found` (the indices, one string each, concatenated at the end).
-- Mode 'lists': the lists `lists`, in order, from item `start` of the first, `step` items
-- at most in all (an empty list counts as one). Returns {lists read to their end, next start
-- in the next one, indices}.
-- Mode 'routed': the own queues of `workers` (the map's `routed` index, as the caller read
-- it), walked as 'lists'; a worker whose queue this call read whole, with none of the map's
-- tasks, leaves the index.
-- Mode 'rest': a window of `step` items of the shared queue from `start`; the call whose
-- window reaches its end (or, with `last` = 1, the call that reads the rest of it however
-- long) also reads, in the same atomic step, every lease the map's `leased` index names and
-- the map's pool. Tasks and partials move between those places both ways (the tree of
-- partials: a merger takes partials from the pool into its lease, a dead one's go back;
-- a lease goes back to the shared queue, whose head is in this window), so one step that
-- reads them all sees each exactly where it is. Only the live incarnation's lease entries
-- count (an entry of another is stale: not "somewhere"); a partial leased to a merger
-- stands for every task it covers; a worker whose lease holds nothing of the map leaves the
-- index. Returns {next start, or -1 once past the end, the shared queue's length, indices}.
-- Mode 'lease': the live lease entries of the map held by one worker. Returns {indices}.
local mode, mid = ARGV[2], ARGV[3]
local found = {}

-- The indices of the map's frames among `items` (task or result frames, stubs) go to `found`.
local function map_indices(items)
  for _, item in ipairs(items) do
    if frame_map(item) == mid then
      found[#found + 1] = string.sub(item, IDX_FROM, IDX_TO)
      if string.byte(item, STATUS_AT) == STATUS_MERGED then item_indices(item, found) end
    end
  end
end

-- The indices of the map's tasks leased to worker `w`'s live incarnation go to `found`;
-- returns whether its lease may hold entries of the map (any of the map, of any incarnation;
-- a dead worker's, until it is given back: whether it has a lease at all).
local function leased_to(w)
  local live = redis.call('GET', K.incarnation(w))
  if not live then return redis.call('EXISTS', K.lease(w)) == 1 end   -- dead: none counts (it is given back)
  local flat = redis.call('HGETALL', K.lease(w))
  local holds = false
  for i = 1, #flat, 2 do
    if tid_map(flat[i]) == mid then
      holds = true
      if lease_inc(flat[i + 1]) == live then
        if is_partial_id(flat[i]) then         -- a partial leased to a merger: every task it covers
          item_indices(lease_frame(flat[i + 1]), found)
        else
          found[#found + 1] = tid_index(flat[i])
        end
      end
    end
  end
  return holds
end

if mode == 'lease' then
  leased_to(ARGV[4])
  return {table.concat(found)}
end

local step, start = tonumber(ARGV[4]), tonumber(ARGV[5])
if mode == 'rest' then
  local shared = K.shared_queue()
  local len = redis.call('LLEN', shared)
  if ARGV[6] ~= '1' and len - start > step then
    map_indices(redis.call('LRANGE', shared, start, start + step - 1))
    return {start + step, len, table.concat(found)}
  end
  map_indices(redis.call('LRANGE', shared, start, -1))
  local index = K.map_leased(mid)
  for _, w in ipairs(redis.call('SMEMBERS', index)) do
    if not leased_to(w) then redis.call('SREM', index, w) end
  end
  map_indices(redis.call('LRANGE', K.pool(mid), 0, -1))
  return {-1, len, table.concat(found)}
end

-- 'lists' and 'routed': ARGV[6...] are the places, a list's key or a worker's name
local routed = mode == 'routed'
local done, budget = 0, step
for i = 6, #ARGV do
  if budget <= 0 then break end
  local items = redis.call('LRANGE', routed and K.queue(ARGV[i]) or ARGV[i], start, start + budget - 1)
  local before = #found
  map_indices(items)
  if #items == budget then                    -- more may follow: the next call goes on from here
    start, budget = start + budget, 0
  else
    if routed and start == 0 and #found == before then redis.call('SREM', K.map_routed(mid), ARGV[i]) end
    done, start = i - 5, 0
    budget = budget - math.max(#items, 1)
  end
end
return {done, start, table.concat(found)}
