-- queue/ticket.lua: a library prepended to the waiting-room scripts (internal/queue/scripts.go),
-- so the packed ticket has one reader and one writer (purchase.lua reads it with its own lines).
-- A ticket is the tickets hash's value for a user: "state|line|pass|expires"
--   state   w waiting, a admitted (holds a pass), x its pass expired unused, s its pass bought
--   line    number in the line (1 = first ever); 0 until the start numbers the pre-start group
--   pass    "<user>.<n>" ('' before admission)   expires  the pass's expiry in unix ms (0 before)
local function ticket_unpack(t)
  local st, line, pass, exp = string.match(t, '^(%a)|(%d+)|([^|]*)|(%d+)$')
  return st, tonumber(line), pass, tonumber(exp)
end

local function ticket_pack(st, line, pass, exp)
  return st .. '|' .. string.format('%d', line) .. '|' .. pass .. '|' .. string.format('%d', exp)
end

-- Scores of the line: joins before the start get a random score below 2^52 (drawn by the api
-- from a CSPRNG, never shown), joins after it 2^52 + their line number, so every later join
-- queues behind the whole shuffled group and after every earlier accepted join. Doubles hold
-- integers exactly up to 2^53.
local AFTER_START = 4503599627370496

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
