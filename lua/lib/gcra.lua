-- gcra.lua: a library, not a script, prepended to inventory/purchase.lua and limits/limit.lua
-- (their owners' scripts.go), so the limiter has one implementation. Callers validate rate,
-- period, burst and cost as positive numbers first.

-- GCRA: the TAT (theoretical arrival time, unix ms with fractions) allows a request of `cost`
-- cells when TAT + cost*T - now <= burst*T, T = period/rate; over any window E at most
-- burst + rate*E/period pass. A refusal writes nothing.

-- gcra_step(tat, now_ms, rate, period_ms, burst, cost) -> allowed, remaining, retry_after_ms,
-- reset_ms (whole ms rounded up: waiting that long suffices), new TAT; for a TAT already read
-- (nil: none). The caller stores the new TAT only when allowed. A TAT is at most now +
-- burst*period/rate, so a store keeping entries that long after their write loses nothing.
local function gcra_step(tat, now, rate, period, burst, cost)
  local t = period / rate
  local tau = t * burst
  if not tat or tat < now then
    tat = now
  end
  local new_tat = tat + t * cost
  local diff = now - (new_tat - tau)
  if diff < 0 then
    local remaining = math.floor((now - (tat - tau)) / t)
    if remaining < 0 then remaining = 0 end
    return false, remaining, math.ceil(-diff), math.ceil(tat - now), tat
  end
  return true, math.floor(diff / t), 0, math.ceil(new_tat - now), new_tat
end

-- gcra(key, now_ms, rate, period_ms, burst, cost) -> allowed, remaining, retry_after_ms,
-- reset_ms: one decision on a string key holding the TAT, kept for the time to refill. The TAT
-- goes to SET as a Lua number (17 digits, read back exact: no rounding adds up over a burst).
local function gcra(key, now, rate, period, burst, cost)
  local ok, remaining, retry, reset, new_tat =
    gcra_step(tonumber(redis.call('GET', key)), now, rate, period, burst, cost)
  if ok then
    redis.call('SET', key, new_tat, 'PX', reset + 1)
  end
  return ok, remaining, retry, reset
end

-- now_ms reads Redis TIME as unix milliseconds with a fraction.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
end

-- ms formats a millisecond figure for a reply: fractions must travel as strings.
local function ms(x)
  return string.format('%.3f', x)
end
