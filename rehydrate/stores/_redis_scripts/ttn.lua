-- TTN: microseconds until the first element is due (0 if one is), -1 if the dehydrator is empty.
load_state(false)
local first = earliest()
if first == nil then
  return -1
end
local left = first - clock()
if left < 0 then
  return 0
end
return left
