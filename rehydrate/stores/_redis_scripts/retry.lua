-- RESCHEDULE_MANY (delayed retries): per item from ARGV[5], three values: id, ttl (µs), token
-- (attempt10 .. claim16). For each element still under that token (claimed, or its lease run out
-- and nobody has claimed it since), file it anew at now + ttl, released, its attempt and token
-- kept: reschedule's rule, for every failed handler of a batch in one script. Returns a 1 or a 0
-- per item. The client gives each id once.
load_state(true)
local n = (#ARGV - 4) / 3
local before = earliest()
local now = clock()
local out, soonest = {}, nil
for i = 1, n do
  local at = 2 + 3 * i
  local id, ttl, token = ARGV[at], ARGV[at + 1], ARGV[at + 2]
  local v = redis.call('HGET', E, id)
  if v and token_of(v) == token then
    local _, _, _, attempt, claim16 = parse(v)
    local due = now + tonumber(ttl)
    if claimed(v) then
      CLAIMED = CLAIMED - 1
    end
    redis.call('ZREM', Z, member(id, v))
    file(1, {id}, {int16(due)}, {'t' .. int16(ttl) .. attempt .. claim16}, {payload_of(v)})
    if soonest == nil or due < soonest then
      soonest = due
    end
    out[i] = 1
  else
    out[i] = 0
  end
end
wake_if_sooner(before, soonest)
finish()
return out
