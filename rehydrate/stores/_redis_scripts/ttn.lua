-- TTN: microseconds until the first element is due (0 if one is), -1 if the dehydrator is empty.
load_state(false)
return ttn_at(clock())
