-- gcra.lua: a library, not a script. It is prepended to every script that rate-limits
-- (limit.lua, purchase.lua), so the limiter has one implementation.
--
-- GCRA (generic cell rate algorithm): the key holds the theoretical arrival time (TAT, unix ms
-- with fractions). A request of `cost` cells is allowed when TAT + cost*T - now <= burst*T,
-- where T = period/rate is the emission interval. Allowed requests over a window E number at
-- most burst + rate*E/period. A refusal writes nothing.
--
-- No string.format: the TAT goes to redis.call as the Lua number it is (17 significant digits
-- read back exactly, so no rounding adds up over a burst), and the reply's times are whole
-- milliseconds rounded up (waiting that long always suffices).
--
-- gcra_step(tat, now_ms, rate, period_ms, burst, cost) ->
--   allowed (true/false), remaining (integer), retry_after_ms, reset_ms (integers, rounded
--   up), new TAT (a number)
-- The decision alone, for a TAT already read (nil: none); the caller stores the new TAT only
-- when allowed. Every stored TAT is at most now + burst * period / rate, so a store whose
-- entries all live that long after their write loses nothing by expiring.
-- Callers must validate rate, period, burst and cost as positive numbers first.
-- Included in front of inventory/purchase.lua and limits/limit.lua (their owners' scripts.go).
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

-- gcra(key, now_ms, rate, period_ms, burst, cost) ->
--   allowed (true/false), remaining (integer), retry_after_ms, reset_ms (integers, rounded up)
-- One decision on a string key holding the TAT, with a TTL of the time to refill.
-- Callers must validate rate, period, burst and cost as positive numbers first.
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
