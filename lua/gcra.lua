-- gcra.lua: a library, not a script. It is prepended to every script that rate-limits
-- (limit.lua, purchase.lua), so the limiter has one implementation.
--
-- GCRA (generic cell rate algorithm): the key holds the theoretical arrival time (TAT, unix ms
-- with fractions). A request of `cost` cells is allowed when TAT + cost*T - now <= burst*T,
-- where T = period/rate is the emission interval. Allowed requests over a window E number at
-- most burst + rate*E/period. A refusal writes nothing.
--
-- gcra(key, now_ms, rate, period_ms, burst, cost) ->
--   allowed (true/false), remaining (integer), retry_after_ms, reset_ms (numbers)
-- Callers must validate rate, period, burst and cost as positive numbers first.
local function gcra(key, now, rate, period, burst, cost)
  local t = period / rate
  local tau = t * burst
  local tat = tonumber(redis.call('GET', key))
  if not tat or tat < now then
    tat = now
  end
  local new_tat = tat + t * cost
  local diff = now - (new_tat - tau)
  if diff < 0 then
    local remaining = math.floor((now - (tat - tau)) / t)
    if remaining < 0 then remaining = 0 end
    return false, remaining, -diff, tat - now
  end
  local reset = new_tat - now
  redis.call('SET', key, string.format('%.3f', new_tat), 'PX', math.ceil(reset) + 1)
  return true, math.floor(diff / t), 0, reset
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
