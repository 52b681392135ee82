-- UPDATE: ARGV[5] id, ARGV[6] new payload, ARGV[7] the claim's token, or "" for no fence; ARGV[8]
-- an end of the stored payload to make ARGV[9] instead of writing ARGV[6] ("" for none: a worker
-- recording the occurrence it runs in the schedule it holds, keeping a change made meanwhile; a
-- stored payload that does not end so was re-planned meanwhile, and is left as it is).
-- Returns {1, old payload}, or {0} if the id is unknown (or, fenced, no longer under that claim).
load_state(true)
local id = ARGV[5]
local v = redis.call('HGET', E, id)
if not v or (ARGV[7] ~= '' and not (claimed(v) and token_of(v) == ARGV[7])) then
  return {0}
end
local old = payload_of(v)
local payload = ARGV[6]
local tail = ARGV[8]
if tail ~= '' then
  if #old >= #tail and sub(old, -#tail) == tail then
    payload = sub(old, 1, #old - #tail) .. ARGV[9]
  else
    payload = old -- re-planned meanwhile (a schedule given another trigger): left as it is
  end
end
redis.call('HSET', E, id, sub(v, 1, HEADER) .. payload)
finish()
return {1, old}
