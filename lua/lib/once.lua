-- once.lua: the call record every script runs inside (exactlyonce puts the script at the marker
-- below). A call's first run records its reply under the call's id, in the script's slot; a
-- re-send (timeout, dropped connection, client or cluster retry) gets that reply back and
-- changes nothing but the record's lifetime, so every change happens once.
-- Go caller: exactlyonce.Script's Run, RunWith and RunEach (internal/exactlyonce/once.go).
-- KEYS: the script's own, then the call record key (same hash tag).
-- ARGV: the script's own, then the call's deadline, Unix ms (integer, at most 10 minutes ahead
--   of the server's clock, which bounds a record's life).
-- Reply: the script's, recorded (msgpack keeps integers, strings, nesting); an error reply is
--   not recorded (scripts validate first, so it wrote nothing). A send past its deadline with
--   no record: the error 'LATE ...', nothing run.

local call_key = table.remove(KEYS)
local call_deadline = tonumber(table.remove(ARGV))
if not call_key or not call_deadline or call_deadline < 1 or call_deadline > 1e15
    or call_deadline ~= math.floor(call_deadline) then
  return redis.error_reply('ERR once: the call record key or deadline is missing')
end
local call_clock = redis.call('TIME')
local call_now = tonumber(call_clock[1]) * 1000 + math.floor(tonumber(call_clock[2]) / 1000)
local recorded = redis.call('GET', call_key)
if recorded then
  -- A re-send writes one thing: the record's lifetime, again (to a second past the deadline,
  -- and at least a second: PEXPIRE with 0 would delete it). A WAIT behind this call then
  -- covers the run it recorded (WAIT counts from the connection's last write, and a re-send
  -- comes on another connection).
  redis.call('PEXPIRE', call_key, math.max(call_deadline - call_now + 1000, 1000))
  return cmsgpack.unpack(recorded)
end
-- However late, too: a send that finds no record after its deadline runs nothing, and a record
-- lives until a second past it, so a re-send held back for any time finds the record or is
-- refused. The deadline is by the api's clock, which must agree with this server's within
-- exactlyonce.ClockSkew.
if call_now > call_deadline then
  return redis.error_reply('LATE once: the call arrived after its deadline; it did not run')
end
if call_deadline - call_now > 600000 then
  return redis.error_reply('ERR once: the call deadline is more than 10 minutes ahead of the Redis clock')
end

local function script()
--[[ script ]]
end

local reply = script()
if type(reply) ~= 'table' or reply.err == nil then
  redis.call('SET', call_key, cmsgpack.pack(reply), 'PX', call_deadline - call_now + 1000)
end
return reply
