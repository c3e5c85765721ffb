-- once.lua: the call record every script runs inside (internal/exactlyonce/scripts.go puts the script where the marker
-- is). The api sends each call with an id it minted; the first run records its reply under
-- that id, in the script's own slot, and any re-send of the same call (after a timeout, a
-- dropped connection, a client or cluster retry) returns the recorded reply and changes nothing
-- but the record's lifetime.
-- So every state change happens once however often the transport delivers the call.
--
-- However late, too: each call carries its deadline, fixed when the api built it. A send that
-- finds no record after the deadline (by this server's clock) is refused and runs nothing, and
-- a record lives until a second past the deadline, so a re-send held back anywhere for any
-- time either finds the record or is refused. The deadline is the api's clock, so the api's
-- clock and this server's must agree within the margin the api adds (exactlyonce.ClockSkew).
--
-- KEYS: the script's own keys, then the call record key (same hash tag as the script's keys).
-- ARGV: the script's own arguments, then the call's deadline in Unix ms (an integer, at most
--       10 minutes ahead of the server's clock, which bounds how long a record lives).
-- Reply: the script's reply, recorded (msgpack keeps integers, strings and nesting); an error
-- reply is not recorded (scripts validate before their first write, so an error wrote nothing).
-- A send past its deadline without a record: the error reply 'LATE ...', nothing written.
-- Go caller: exactlyonce.Script.Run and RunEach (internal/exactlyonce/once.go), around every script.

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
