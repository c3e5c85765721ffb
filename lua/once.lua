-- once.lua: the call record every script runs inside (lua.go puts the script where the marker
-- is). The api sends each call with an id it minted; the first run records its reply under
-- that id, in the script's own slot, and any re-send of the same call (after a timeout, a
-- dropped connection, a client or cluster retry) returns the recorded reply and changes nothing
-- but the record's lifetime.
-- So every state change happens once however often the transport delivers the call.
--
-- KEYS: the script's own keys, then the call record key (same hash tag as the script's keys).
-- ARGV: the script's own arguments, then the record's lifetime in ms (integer >= 1).
-- Reply: the script's reply, recorded (msgpack keeps integers, strings and nesting); an error
-- reply is not recorded (scripts validate before their first write, so an error wrote nothing).

local call_key = table.remove(KEYS)
local call_ttl = tonumber(table.remove(ARGV))
if not call_key or not call_ttl or call_ttl < 1 or call_ttl > 1e9 or call_ttl ~= math.floor(call_ttl) then
  return redis.error_reply('ERR once: the call record key or lifetime is missing')
end
local recorded = redis.call('GET', call_key)
if recorded then
  -- A re-send writes one thing: the record's lifetime, again. A WAIT behind this call then
  -- covers the run it recorded (WAIT counts from the connection's last write, and a re-send
  -- comes on another connection).
  redis.call('PEXPIRE', call_key, call_ttl)
  return cmsgpack.unpack(recorded)
end

local function script()
--[[ script ]]
end

local reply = script()
if type(reply) ~= 'table' or reply.err == nil then
  redis.call('SET', call_key, cmsgpack.pack(reply), 'PX', call_ttl)
end
return reply
