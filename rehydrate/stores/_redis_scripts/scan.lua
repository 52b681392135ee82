-- ids, one page: ARGV[5] HSCAN cursor, ARGV[6] page size.
-- Returns {next cursor, id, due, seq, id, due, seq, ...}.
local page = redis.call('HSCAN', M, ARGV[5], 'COUNT', tonumber(ARGV[6]))
local out = {page[1]}
local fields = page[2]
for i = 1, #fields, 2 do
  local v = fields[i + 1]
  out[#out + 1] = fields[i]
  out[#out + 1] = sub(v, 17, 32)
  out[#out + 1] = sub(v, 1, 16)
end
return out
