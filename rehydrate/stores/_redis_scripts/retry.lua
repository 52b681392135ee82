-- RESCHEDULE_MANY (delayed retries) and HAND_BACK (claims given back unrun): ARGV[5] "retry" or
-- "hand_back", then per item from ARGV[6], three values: id, ttl (µs), token (attempt10 ..
-- claim16). retry: each element still under that token (claimed, or its lease run out and nobody
-- has claimed it since) is filed anew at now + ttl, released, its attempt and token kept:
-- reschedule's rule, for every failed handler of a batch in one script. hand_back: only a claimed
-- element under that token, filed so with that claim's attempt undone (attempt one lower, the
-- same claim: the token no longer matches, so a second hand-back does nothing). Returns a 1 or a
-- 0 per item. The client gives each id once.
load_state(true)
local back = ARGV[5] == 'hand_back'
local n = (#ARGV - 5) / 3
local before = earliest()
local now = clock()
local out, soonest = {}, nil
for i = 1, n do
  local at = 3 + 3 * i
  local id, ttl, token = ARGV[at], tonumber(ARGV[at + 1]), ARGV[at + 2]
  local v = redis.call('HGET', H, id)
  out[i] = 0
  if v then
    local lease, seq, old_due, _, attempt, claim, _, start = dec(v)
    local a, c = token_parts(token)
    if a == attempt and c == claim and (lease or not back) then
      if back and attempt > 0 then
        attempt = attempt - 1
      end
      local due = now + ttl
      if lease then
        CLAIMED = CLAIMED - 1
      end
      tb_rem({old_due}, {seq}, {id}, 1)
      file(1, {id}, {due}, function(_, new_seq)
        return enc(false, new_seq, due, ttl, attempt, claim, new_seq)
      end, {sub(v, start)})
      if soonest == nil or due < soonest then
        soonest = due
      end
      out[i] = 1
    end
  end
end
wake_if_sooner(before, soonest)
finish()
return out
