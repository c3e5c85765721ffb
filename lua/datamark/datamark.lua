-- datamark.lua: the marker of the data one Redis slot holds: gen, and per observer
-- o:<observer> = "<count>:<ms>", raised only by that observer. It lives in the data's slot, so
-- it is lost and copied with it; a loss seen is written as the field lost until a restore.
-- One script so each check and its write are atomic.
-- Go caller: datamark.call (internal/datamark/datamark.go).
-- KEYS[1] the marker hash.  ARGV[1] the mode, then:
--   'check'    [2] gen the observer saw ('' none)  [3] observer id  [4] the count it saw the
--              replicas confirm (integer >= 0)  [5] '1' when another gen is a loss too (the
--              reconciler, which records every gen a restore writes), '0' when it is a restore
--              to follow (an api)
--   'adopt'    [2] a fresh gen: written only when the slot has no marker at all
--   'restored' [2] a fresh gen: replaces the marker (and its lost field) after a restore
--   'lose'     [2] the reason: written as lost
-- Reply: {'ok', gen, the observer's new count} | {'absent'} (check: no marker, none seen)
--   | {'lost', reason} | {'exists', gen or '', lost or ''} (adopt: left as it was).
-- Bad arguments: an error reply, nothing written.

local function word(s)
  return s and #s >= 1 and #s <= 64 and string.match(s, '^[%w_-]+$') ~= nil
end

local mode = ARGV[1]
if mode == 'check' then
  local seen_gen, observer, confirmed, strict = ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5]
  if not seen_gen or not word(observer) or not confirmed or confirmed < 0
      or confirmed ~= math.floor(confirmed) or (strict ~= '0' and strict ~= '1') then
    return redis.error_reply('ERR datamark: check needs a gen, an observer, a count and a strictness')
  end
  local h = redis.call('HMGET', KEYS[1], 'gen', 'lost')
  if h[2] then
    return {'lost', h[2]}
  end
  if not h[1] then
    if seen_gen == '' then
      return {'absent'}
    end
    redis.call('HSET', KEYS[1], 'lost', 'gone')
    return {'lost', 'gone'}
  end
  local field = 'o:' .. observer
  local count = tonumber(string.match(redis.call('HGET', KEYS[1], field) or '', '^(%d+):')) or 0
  if seen_gen ~= '' then
    if h[1] ~= seen_gen then
      if strict == '1' then
        redis.call('HSET', KEYS[1], 'lost', 'replaced')
        return {'lost', 'replaced'}
      end
      count = 0 -- a restore's marker: this observer starts afresh
    elseif count < confirmed then
      redis.call('HSET', KEYS[1], 'lost', 'behind')
      return {'lost', 'behind'}
    end
  end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  -- Observer fields untouched for a day are removed: their api is gone.
  local all = redis.call('HGETALL', KEYS[1])
  for i = 1, #all, 2 do
    local ms = tonumber(string.match(all[i + 1], ':(%d+)$'))
    if string.sub(all[i], 1, 2) == 'o:' and ms and ms < now - 86400000 then
      redis.call('HDEL', KEYS[1], all[i])
    end
  end
  redis.call('HSET', KEYS[1], field, (count + 1) .. ':' .. now)
  return {'ok', h[1], count + 1}
end

local arg = ARGV[2]
if not word(arg) then
  return redis.error_reply('ERR datamark: ' .. tostring(mode) .. ' needs a gen or reason of [A-Za-z0-9_-]{1,64}')
end
if mode == 'adopt' then
  local h = redis.call('HMGET', KEYS[1], 'gen', 'lost')
  if h[1] or h[2] then
    return {'exists', h[1] or '', h[2] or ''}
  end
  redis.call('HSET', KEYS[1], 'gen', arg)
  return {'ok', arg, 0}
elseif mode == 'restored' then
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[1], 'gen', arg)
  return {'ok', arg, 0}
elseif mode == 'lose' then
  redis.call('HSET', KEYS[1], 'lost', arg)
  return {'lost', arg}
end
return redis.error_reply('ERR datamark: unknown mode')
