"""The Lua scripts that change the subscription state in Redis, each in one step.

Owns the server-side half of :mod:`psmatch.adapters.state`'s key layout (described
there): :data:`APPLY_LUA` applies a chunk of subscription changes (the offset check per
source, the ``subs`` hash, the version, the change log and its trimming) and
:data:`REBUILD_LUA` starts the state afresh under a new version. A script runs
atomically, so no reader sees half of a chunk.
"""

APPLY_LUA = """
local retention = tonumber(ARGV[1])
local floor = tonumber(ARGV[2])  -- the version before the apply() this chunk is part of
local v = tonumber(redis.call('GET', KEYS[2]) or '0')
local applied = 0
local skipped = 0
local last = {}  -- per source: the last applied offset, read once, written once
local i = 3
while i <= #ARGV do
  local src = ARGV[i]
  local off = tonumber(ARGV[i + 1])
  local op = ARGV[i + 2]
  local id = ARGV[i + 3]
  local rec = ARGV[i + 4]
  local nf = ARGV[i + 5]
  i = i + 6
  if last[src] == nil then
    last[src] = tonumber(redis.call('HGET', KEYS[4], src) or '-1')
  end
  if off > last[src] then
    last[src] = off
    if op == 'put' then
      redis.call('HSET', KEYS[1], id, rec)
      v = v + 1
      if nf == '' then
        redis.call('XADD', KEYS[3], v .. '-0', 'op', 'put', 'id', id, 'rec', rec)
      else
        redis.call('XADD', KEYS[3], v .. '-0', 'op', 'put', 'id', id, 'rec', rec, 'nf', nf)
      end
      applied = applied + 1
    elseif redis.call('HDEL', KEYS[1], id) == 1 then
      v = v + 1
      redis.call('XADD', KEYS[3], v .. '-0', 'op', 'del', 'id', id)
      applied = applied + 1
    else
      skipped = skipped + 1
    end
  else
    skipped = skipped + 1
  end
end
for src, off in pairs(last) do
  redis.call('HSET', KEYS[4], src, off)
end
redis.call('SET', KEYS[2], v)
local keep_from = math.min(v - retention, floor) + 1
if keep_from > 1 then
  redis.call('XTRIM', KEYS[3], 'MINID', keep_from .. '-0')
end
return {v, applied, skipped}
"""

REBUILD_LUA = """
local v = tonumber(redis.call('GET', KEYS[2]) or '0') + 1
redis.call('DEL', KEYS[1], KEYS[3], KEYS[4])
redis.call('SET', KEYS[2], v)
return v
"""
