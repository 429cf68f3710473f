"""The Lua side of the Redis reference hosts (:mod:`taskboard.hosts.redis`): the board's
keys, and the source of every script, by name, for an injected clock (:data:`SCRIPTS`) and
for ``clock="server"`` (:data:`SERVER_SCRIPTS`).

Each operation of a board is one of these scripts, run with ``EVALSHA``: Redis runs a script
alone, so its checks and writes are atomic. A script's first lines set its locals from ARGV,
and the bodies after them are shared by both clocks, so the two variants run the very same
checks and writes. Plain strings, no client: the server-clock mutants
(:mod:`taskboard.hosts.server_mutants`) patch these very sources.
"""

from __future__ import annotations

#: The board's keys, one hash (or set) per column, each ``taskboard:{board_id}:<column>``.
#: Every script gets all of them as KEYS, in this order, so a script touches only
#: declared keys, and the ``{board_id}`` hash tag keeps them in one cluster slot.
_COLUMNS = (
    "state",  # hash: task id -> "open" | "claimed" | "done" | "failed" (the task exists iff here)
    "title",  # hash: task id -> title
    "deps",  # hash: task id -> JSON array of dependency ids, in the original order
    "owner",  # hash: task id -> owner ("" when none)
    "token",  # hash: task id -> the current lease's token (absent: no lease)
    "fence",  # hash: task id -> the current lease's fence (absent: no lease)
    "until",  # hash: task id -> the current lease's until, microseconds (absent: no expiry)
    "seq",  # hash: task id -> seq
    "issued",  # hash: task id -> the greatest fence ever issued for it; never reset or lowered
    "tokens",  # set: every token ever issued by this board, for any task; never pruned
    "clock",  # string: the latest instant (microseconds) a script ran at, with an injected clock
)

#: The line of :data:`_PRELUDE` that picks the fence scheme: a board with ``fences="time"``
#: registers every script with :data:`_TIME_FENCES` in its place.
_COUNTER_FENCES = "local TIME_FENCES = false  -- fences='counter'"
_TIME_FENCES = "local TIME_FENCES = true  -- fences='time'"

# Shared by every script: key names, exact integer comparison, liveness, a task's row and
# the holder checks of renew/release/complete/fail. Integers (until, fence, seq) stay
# decimal strings in Lua: Lua numbers are doubles, exact only up to 2**53, and
# microseconds since the epoch pass that in the year 2255.
_PRELUDE = """
local STATE, TITLE, DEPS, OWNER, TOKEN = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local FENCE, UNTIL, SEQ, ISSUED, TOKENS = KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local CLOCK = KEYS[11]
local TIME_FENCES = false  -- fences='counter'

-- a < b for canonical decimal integers (an optional '-', no leading zeros), exact at any size
local function less(a, b)
  local na, nb = string.sub(a, 1, 1) == '-', string.sub(b, 1, 1) == '-'
  if na ~= nb then return na end
  if na then a, b = string.sub(b, 2), string.sub(a, 2) end
  if #a ~= #b then return #a < #b end
  for i = 1, #a do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return false
end

-- SPEC 2: a lease is live iff it has no until or now < until; at now == until it has expired
local function live(id, now)
  if not redis.call('HGET', TOKEN, id) then return false end
  local until_ = redis.call('HGET', UNTIL, id)
  return (not until_) or less(now, until_)
end

-- the task as the Python side reads it (false where a field is absent)
local function row(id)
  return {id, redis.call('HGET', TITLE, id), redis.call('HGET', DEPS, id),
          redis.call('HGET', STATE, id), redis.call('HGET', OWNER, id),
          redis.call('HGET', TOKEN, id), redis.call('HGET', FENCE, id),
          redis.call('HGET', UNTIL, id), redis.call('HGET', SEQ, id)}
end

-- renew/release/complete/fail: an error reply, or false when token holds a live lease on id
-- (SPEC 3.4 "reject": an expired lease is lost even if nobody took over)
local function holder(id, token, now)
  local state = redis.call('HGET', STATE, id)
  if not state then return {'not_found'} end
  local current = redis.call('HGET', TOKEN, id)
  if state ~= 'claimed' or not current then return {'not_claimed', state} end
  if current ~= token then return {'wrong_token'} end
  if not live(id, now) then return {'expired'} end
  return false
end

-- the lease's until: '' means no expiry
local function set_until(id, until_)
  if until_ == '' then
    redis.call('HDEL', UNTIL, id)
  else
    redis.call('HSET', UNTIL, id, until_)
  end
end

-- now: Redis TIME as microseconds since the epoch, a canonical decimal string
local function server_now()
  local t = redis.call('TIME')
  return t[1] .. string.format('%06d', tonumber(t[2]))
end

-- record the next fence of id as issued: one above the greatest fence issued for it, and
-- with TIME_FENCES at least the server's TIME in microseconds, so that it is greater than
-- every fence issued before the server lost its keys (HINCRBY, the counter's write, fails
-- on a non-integer before anything visible is written)
local function next_fence(id)
  if TIME_FENCES then
    local floor = server_now()
    local issued = redis.call('HGET', ISSUED, id)
    if (not issued) or less(issued, floor) then
      redis.call('HSET', ISSUED, id, floor)
      return
    end
  end
  redis.call('HINCRBY', ISSUED, id, 1)
end
"""

# ARGV: groups of ten: id, title, deps (JSON), state, owner, has_lease ("1"/"0"), token,
# fence, until ("" = none), seq. Inserts only the ids not on the board yet; returns how many.
_INSERT = """
local added = 0
for i = 1, #ARGV, 10 do
  local id = ARGV[i]
  if redis.call('HEXISTS', STATE, id) == 0 then
    redis.call('HSET', TITLE, id, ARGV[i + 1])
    redis.call('HSET', DEPS, id, ARGV[i + 2])
    redis.call('HSET', OWNER, id, ARGV[i + 4])
    redis.call('HSET', SEQ, id, ARGV[i + 9])
    if ARGV[i + 5] == '1' then  -- an initial lease: its fence and token count as issued
      redis.call('HSET', TOKEN, id, ARGV[i + 6])
      redis.call('HSET', FENCE, id, ARGV[i + 7])
      redis.call('HSET', ISSUED, id, ARGV[i + 7])
      set_until(id, ARGV[i + 8])
      redis.call('SADD', TOKENS, ARGV[i + 6])
    end
    redis.call('HSET', STATE, id, ARGV[i + 3])
    added = added + 1
  end
end
return added
"""

# One snapshot: the script runs alone on the server, so no write lands in between.
_LIST = """
local rows = {}
for i, id in ipairs(redis.call('HKEYS', STATE)) do rows[i] = row(id) end
return rows
"""

# The bodies of claim, renew and finish start from locals (``id``, ``now``, ``until_`` ...);
# each script's first lines set them from ARGV (an injected clock) or from Redis TIME
# (``clock="server"``), so both variants run the very same checks and writes.

# Locals: id, agent, now, until_ ("" = no expiry), token (a fresh one). SPEC 3.1's order.
_CLAIM_BODY = """
local state = redis.call('HGET', STATE, id)
if not state then return {'not_found'} end
if state == 'done' then return {'terminal'} end
for _, dep in ipairs(cjson.decode(redis.call('HGET', DEPS, id))) do
  local dep_state = redis.call('HGET', STATE, dep)
  if dep_state ~= 'done' then return {'blocked', dep, dep_state or 'unknown'} end
end
if state == 'claimed' and live(id, now) then
  return {'taken', redis.call('HGET', OWNER, id)}
end
if agent == '' then return {'empty_agent'} end
if redis.call('SISMEMBER', TOKENS, token) == 1 then return {'token_used'} end
-- Accepted. The first write that can fail (HINCRBY on a non-integer) touches no visible field.
next_fence(id)
redis.call('HINCRBY', SEQ, id, 1)
redis.call('SADD', TOKENS, token)
redis.call('HSET', STATE, id, 'claimed')
redis.call('HSET', OWNER, id, agent)
redis.call('HSET', TOKEN, id, token)
redis.call('HSET', FENCE, id, redis.call('HGET', ISSUED, id))  -- the string: exact
set_until(id, until_)
return {'ok', row(id)}
"""

# Locals: id, token, now, until_ ("" = no expiry). SPEC 3.5.
_RENEW_BODY = """
local rejected = holder(id, token, now)
if rejected then return rejected end
redis.call('HINCRBY', SEQ, id, 1)
set_until(id, until_)
return {'ok', row(id)}
"""

# Locals: id, token, now, new_state. SPEC 3.2, 3.3, 3.6; the fence history stays.
_FINISH_BODY = """
local rejected = holder(id, token, now)
if rejected then return rejected end
redis.call('HINCRBY', SEQ, id, 1)
redis.call('HSET', STATE, id, new_state)
redis.call('HSET', OWNER, id, '')
redis.call('HDEL', TOKEN, id)
redis.call('HDEL', FENCE, id)
redis.call('HDEL', UNTIL, id)
return {'ok'}
"""

# The until of a claim or renew at an instant: used by both clocks. The Python side passes
# the TTL as integer microseconds ("" = no expiry), and the script adds it to now as decimal
# strings, exactly, so the until it stores (and returns) is exactly now + ttl.
_UNTIL_AT = """
-- a + b for canonical non-negative decimal integers, exact at any size
local function add(a, b)
  local digits, carry, i, j = {}, 0, #a, #b
  while i > 0 or j > 0 or carry > 0 do
    local sum = carry
    if i > 0 then sum = sum + string.byte(a, i) - 48 end
    if j > 0 then sum = sum + string.byte(b, j) - 48 end
    digits[#digits + 1] = string.char(48 + sum % 10)
    carry = (sum - sum % 10) / 10
    i, j = i - 1, j - 1
  end
  return string.reverse(table.concat(digits))
end

-- SPEC 2: ttl (microseconds) gives now + ttl; '' gives no expiry ('')
local function until_at(now, ttl)
  if ttl == '' then return '' end
  return add(now, ttl)
end
"""

# An injected clock: the Python side reads it and passes now (and until) as ARGV, before
# the script runs. Two calls can then arrive out of order: a renew that read the time just before a
# lease's until runs after another call has found that lease expired, and would revive it
# (SPEC 3.5; the race of a PostgreSQL board that reads now() before its row lock). The
# store's time never goes back instead: a script that gets an instant older than the latest
# one a script ran at runs at that latest instant (instants before 1970 are taken as given).
_STORE_NOW = """
-- the instant a script runs at, and whether it is later than the one the call read
local function store_now(now)
  local latest = redis.call('GET', CLOCK)
  if latest and string.sub(latest, 1, 1) ~= '-' and less(now, latest) then
    return latest, true
  end
  redis.call('SET', CLOCK, now)
  return now, false
end
"""
# ARGV: id, agent, now, until ("" = no expiry), a fresh token, ttl (microseconds, "" = none).
_CLAIM = (
    """
local id, agent, token = ARGV[1], ARGV[2], ARGV[5]
local now, raised = store_now(ARGV[3])
local until_ = raised and until_at(now, ARGV[6]) or ARGV[4]"""
    + _CLAIM_BODY
)
# ARGV: id, token, now, until ("" = no expiry), ttl (microseconds, "" = none).
_RENEW = (
    """
local id, token = ARGV[1], ARGV[2]
local now, raised = store_now(ARGV[3])
local until_ = raised and until_at(now, ARGV[5]) or ARGV[4]"""
    + _RENEW_BODY
)
# ARGV: id, token, now, the new state.
_FINISH = (
    """
local id, token, new_state = ARGV[1], ARGV[2], ARGV[4]
local now = store_now(ARGV[3])"""
    + _FINISH_BODY
)

# ``clock="server"``: now is Redis TIME, read inside the script (Redis 7 replicates a
# script's effects, not the script, so a non-deterministic command is allowed anywhere in
# it). TIME is the server's real time when called, while Redis's own key expiry is frozen
# at the script's start; these scripts use only TIME.
# ARGV: id, agent, ttl (microseconds, "" = no expiry), a fresh token.
_SERVER_CLAIM = (
    """
local id, agent, ttl, token = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local now = server_now()
local until_ = until_at(now, ttl)"""
    + _CLAIM_BODY
)
# ARGV: id, token, ttl (microseconds, "" = no expiry).
_SERVER_RENEW = (
    """
local id, token, ttl = ARGV[1], ARGV[2], ARGV[3]
local now = server_now()
local until_ = until_at(now, ttl)"""
    + _RENEW_BODY
)
# ARGV: id, token, the new state.
_SERVER_FINISH = (
    """
local id, token, new_state = ARGV[1], ARGV[2], ARGV[3]
local now = server_now()"""
    + _FINISH_BODY
)

#: The Lua source of every script, by name, for an injected clock; both boards register
#: these same scripts.
SCRIPTS = {
    name: _PRELUDE + _UNTIL_AT + _STORE_NOW + body
    for name, body in (
        ("insert", _INSERT),
        ("list", _LIST),
        ("claim", _CLAIM),
        ("renew", _RENEW),
        ("finish", _FINISH),
    )
}

#: The Lua source of every script, by name, for ``clock="server"`` (time from Redis TIME).
SERVER_SCRIPTS = {
    name: _PRELUDE + _UNTIL_AT + body
    for name, body in (
        ("insert", _INSERT),
        ("list", _LIST),
        ("claim", _SERVER_CLAIM),
        ("renew", _SERVER_RENEW),
        ("finish", _SERVER_FINISH),
    )
}


def _switched(source: str) -> str:
    """A script's source with the time fence scheme on (see :data:`_COUNTER_FENCES`)."""
    if source.count(_COUNTER_FENCES) != 1:
        raise AssertionError("a taskboard script lacks the fence scheme line of the prelude")
    return source.replace(_COUNTER_FENCES, _TIME_FENCES)
