-- REARM: ARGV[5] the time (µs, this store's clock) the ttls count from (see start_of), or "" for
-- now; ARGV[6] which items are rewrites ("" for none, else a "0" or a "1" per item); ARGV[7] the
-- bytes of a schedule unscheduled while its occurrence ran (REMOVED, see below); then per item,
-- four values: id, ttl (µs), token (attempt10 .. claim16), payload. For each: end the claim
-- and file the element anew with that payload at start + ttl, unclaimed, attempt 0 (a recurring
-- schedule's next occurrence, filed as the current one ends: due at its nominal time, however
-- long the call took to get here), only if the element is claimed under that very token. The
-- payload of a rewrite is "<old end>\n<new end>" and stands for the stored payload with its end
-- <old end> made <new end>: a schedule's envelope (JSON, next its last key) filed for its next
-- occurrence, sent as the ends that differ (its next time, an extra run's request) instead of
-- encoded again, so that what was written into it while the claim ran is kept (told apart by
-- ARGV[6], not by its bytes: a serializer may write anything). A rewrite whose stored payload
-- does not end that way was re-planned while the claim ran (a schedule given another trigger,
-- its first occurrence written into it): it is filed as stored, due at once, for the runner that
-- claims it to file for its time. An element stored as REMOVED (unscheduled while the claim
-- ran) is removed instead; one given as REMOVED (by the runner that claimed it so) is removed if
-- it still is, else filed as stored (written into since), due at once. Returns a 1 or a 0 per
-- item.
load_state(true)
local n = (#ARGV - 7) / 4
local rewrites = ARGV[6]
local REMOVED = ARGV[7]
local before = earliest()
local now = start_of(ARGV[5], clock())
local ids = {}
for i = 1, n do
  ids[i] = ARGV[4 + 4 * i]
end
local out = {}
if n == 0 then
  return out
end
-- One HMGET, one ZREM and one HSET and ZADD (in file) for the whole batch, as an ack does: a
-- call per item cost twice an ack's time on the server.
local values = hmget(E, ids, n)
local members, kept, dues, tails, payloads, k = {}, {}, {}, {}, {}, 0
local gone, gone_members, g = {}, {}, 0
local done, soonest = {}, nil
for i = 1, n do
  local at = 4 + 4 * i
  local id, ttl, token = ids[i], ARGV[at + 1], ARGV[at + 2]
  local v = values[i]
  -- An id given twice is rearmed by its first item only (then it is no longer claimed).
  local payload = ARGV[at + 3]
  local ok = v and not done[id] and claimed(v) and token_of(v) == token
  local drop = false
  if ok and rewrites ~= '' and byte(rewrites, i) == 49 then -- "1"
    local newline = find(payload, '\n', 1, true)
    local tail = sub(payload, 1, newline - 1)
    local stored = payload_of(v)
    if #stored >= #tail and sub(stored, -#tail) == tail then
      payload = sub(stored, 1, #stored - #tail) .. sub(payload, newline + 1)
    elseif stored == REMOVED then
      drop = true
    else
      payload = stored
      ttl = '0'
    end
  elseif ok then
    local stored = payload_of(v)
    if stored == REMOVED then
      drop = true
    elseif payload == REMOVED then
      payload = stored
      ttl = '0'
    end
  end
  if ok and drop then
    done[id] = true
    CLAIMED = CLAIMED - 1
    g = g + 1
    gone[g], gone_members[g] = id, member(id, v)
    out[i] = 1
  elseif ok then
    done[id] = true
    local due = now + tonumber(ttl)
    CLAIMED = CLAIMED - 1
    k = k + 1
    members[k] = member(id, v)
    kept[k], dues[k], tails[k], payloads[k] = id, int16(due), 't' .. int16(ttl) .. UNCLAIMED, payload
    if soonest == nil or due < soonest then
      soonest = due
    end
    out[i] = 1
  elseif out[i] == nil then
    out[i] = 0
  end
end
if k > 0 then
  each_chunk('ZREM', Z, members, k)
  file(k, kept, dues, tails, payloads)
end
if g > 0 then
  each_chunk('ZREM', Z, gone_members, g)
  each_chunk('HDEL', E, gone, g)
end
wake_if_sooner(before, soonest)
finish(g > 0)
return out
