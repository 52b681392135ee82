-- RESCHEDULE_MANY (delayed retries) and HAND_BACK (claims given back unrun): ARGV[5] "retry" or
-- "hand_back", then per item from ARGV[6], three values: id, ttl (µs), token (attempt10 ..
-- claim16). retry: each element still under that token (claimed, or its lease run out and nobody
-- has claimed it since) is filed anew at now + ttl, released, its attempt and token kept:
-- reschedule's rule, for every failed handler of a batch in one script. hand_back: only a claimed
-- element under that token, filed so with that claim's attempt undone (attempt10 one lower, the
-- same claim16: the token no longer matches, so a second hand-back does nothing). Returns a 1 or a
-- 0 per item. The client gives each id once.
load_state(true)
local back = ARGV[5] == 'hand_back'
local n = (#ARGV - 5) / 3
local before = earliest()
local now = clock()
local out, soonest = {}, nil
for i = 1, n do
  local at = 3 + 3 * i
  local id, ttl, token = ARGV[at], ARGV[at + 1], ARGV[at + 2]
  local v = redis.call('HGET', E, id)
  if v and token_of(v) == token and (claimed(v) or not back) then
    local _, _, _, attempt, claim16 = parse(v)
    if back and tonumber(attempt) > 0 then
      attempt = string.format('%010d', tonumber(attempt) - 1)
    end
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
