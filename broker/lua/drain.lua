-- ARGV: ns, worker, scan_step
-- Move up to `step` tasks of a worker's own queue to the shared queue (bounded: callers
-- loop until it returns 0). ARGV: ns, worker, step. Returns how many are left.
return drain_queue(ARGV[2], tonumber(ARGV[3]))
