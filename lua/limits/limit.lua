-- limit.lua: one GCRA rate-limit decision for one subject of one policy (gcra.lua is
-- prepended). One script so reading the TAT, comparing it with Redis TIME and writing the new
-- one are atomic: two api instances deciding at once cannot both pass on one cell.
-- Go caller: limits.Limiter.AllowN (internal/limits/limits.go).
-- KEYS[1] the limiter key (its own hash tag: <prefix>{rl:<policy>:<subject>})
-- ARGV[1] rate: requests per period (0 < rate <= 1e9)  [2] period ms (1..1e12)
--   [3] burst: requests allowed at once (integer 1..1e9)  [4] cost: cells taken (integer 1..burst)
-- Reply: {allowed '1'|'0', remaining (integer), retry_after_ms ('0.000' when allowed), reset_ms
--   (until a full burst again)}, all strings, the times with fractions.
-- A refusal writes nothing, so hammering a closed limiter does not push its reopening back.
-- Bad ARGV is an error reply and writes nothing.

local rate = tonumber(ARGV[1])
local period = tonumber(ARGV[2])
local burst = tonumber(ARGV[3])
local cost = tonumber(ARGV[4])
-- tonumber accepts 'inf' and 'nan': bound every figure so none slips past the checks.
if not rate or not (rate > 0 and rate <= 1e9) or not period or not (period >= 1 and period <= 1e12) then
  return redis.error_reply('ERR limit: rate and period must be positive numbers')
end
if not burst or not (burst >= 1 and burst <= 1e9) or burst ~= math.floor(burst) then
  return redis.error_reply('ERR limit: burst must be an integer >= 1')
end
if not cost or cost < 1 or cost ~= math.floor(cost) or cost > burst then
  return redis.error_reply('ERR limit: cost must be an integer in 1..burst')
end

local allowed, remaining, retry, reset = gcra(KEYS[1], now_ms(), rate, period, burst, cost)
return {allowed and '1' or '0', string.format('%d', remaining), ms(retry), ms(reset)}
