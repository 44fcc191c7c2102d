//! The Lua scripts of the Redis tier: every compare-and-set in one round
//! trip, atomic on the server (a script runs alone).
//!
//! Each reads the run, re-checks the whole rule on the value it read (the
//! same rule as `ledger::reclaim` and the SQL guards), and either rewrites
//! the value with the key's TTL (the dedup window) or changes nothing. Each
//! answers `{verdict, value}`: the value written, or the one found.
//! Times come in as `ARGV` (the service's clock, as on SQLite), so the
//! injected clock of the tests drives leases exactly as it does on SQL.

use redis::Script;

/// The scripts, loaded once (`EVALSHA`, falling back to `EVAL` after a
/// restart emptied Redis's script cache).
#[derive(Debug)]
pub(super) struct Scripts {
    pub(super) reclaim: Script,
    pub(super) renew: Script,
    pub(super) finish: Script,
}

impl Scripts {
    pub(super) fn new() -> Self {
        Self {
            reclaim: Script::new(&format!("{STORE}{RECLAIM}")),
            renew: Script::new(&format!("{STORE}{OWNED}{RENEW}")),
            finish: Script::new(&format!("{STORE}{OWNED}{FINISH}")),
        }
    }
}

/// Shared by every script: writes the run back with the key's TTL.
const STORE: &str = r"
local function store(r, ttl)
  local text = cjson.encode(r)
  redis.call('SET', KEYS[1], text, 'PX', ttl)
  return text
end
";

/// A claim's takeover of an existing run.
/// ARGV: now, payload hash, new owner, lease ms, reclaim fields (JSON),
/// max reclaims, retry window ms, TTL ms.
/// Verdicts: `claimed`; `exhausted` (a `failed_retryable` run past its
/// reclaim budget, now `failed_terminal`); `kept` (not reclaimable: the
/// value found); `gone` (the key expired meanwhile).
const RECLAIM: &str = r"
local raw = redis.call('GET', KEYS[1])
if not raw then return {'gone'} end
local r = cjson.decode(raw)
local now = tonumber(ARGV[1])
if r.h ~= ARGV[2] then return {'kept', raw} end
if r.s == 'failed_retryable'
   and (r.r >= tonumber(ARGV[6]) or r.c + tonumber(ARGV[7]) <= now) then
  r.ps = r.s
  r.s = 'failed_terminal'
  r.v = r.v + 1
  r.why = 'reclaim_budget_exhausted'
  if r.err == nil or r.err == cjson.null then r.err = r.why end
  r.o = cjson.null
  r.e = cjson.null
  r.u = now
  return {'exhausted', store(r, ARGV[8])}
end
local expired = r.s == 'processing' and r.e ~= cjson.null and r.e <= now
if not (r.s == 'failed_retryable' or expired) then return {'kept', raw} end
local f = cjson.decode(ARGV[5])
r.ps = r.s
r.s = 'processing'
r.o = ARGV[3]
r.e = now + tonumber(ARGV[4])
r.ls = now
r.v = r.v + 1
r.a = r.a + 1
r.r = r.r + 1
r.cb = f.cb
if type(r.m) ~= 'table' then r.m = {} end
if f.ex ~= cjson.null then r.m.ex = f.ex end
if f.wv ~= cjson.null then r.m.wv = f.wv end
r.u = now
return {'claimed', store(r, ARGV[8])}
";

/// Shared by the owner's scripts: the run and its stored text when the
/// caller's lease (ARGV[2] owner, ARGV[3] fencing version) is its live one
/// at ARGV[1] (state `processing`, lease not expired); else `nil` and the
/// `lost` answer.
const OWNED: &str = r"
local function owned_run()
  local raw = redis.call('GET', KEYS[1])
  if not raw then return nil, {'lost'} end
  local r = cjson.decode(raw)
  if r.s == 'processing' and r.o == ARGV[2] and r.v == tonumber(ARGV[3])
     and r.e ~= cjson.null and r.e > tonumber(ARGV[1]) then
    return r, raw
  end
  return nil, {'lost', raw}
end
";

/// The owner's renewal, capped by the lease's maximum total life.
/// ARGV: now, owner, version, lease ms, max life ms, TTL ms.
/// Verdicts: `ok` (the value written), `lost` (the value found, if any).
const RENEW: &str = r"
local r, raw = owned_run()
if not r then return raw end
local now = tonumber(ARGV[1])
local cap = r.ls + tonumber(ARGV[5])
if cap <= now then return {'lost', raw} end
local until_ms = now + tonumber(ARGV[4])
if until_ms > cap then until_ms = cap end
r.ps = r.s
r.v = r.v + 1
r.e = until_ms
r.u = now
return {'ok', store(r, ARGV[6])}
";

/// The owner's move out of `processing` (complete, fail).
/// ARGV: now, owner, version, the new state, the fields (JSON), TTL ms.
/// Verdicts: `ok` (the value written), `lost` (the value found, if any).
const FINISH: &str = r"
local r, found = owned_run()
if not r then return found end
local now = tonumber(ARGV[1])
local f = cjson.decode(ARGV[5])
r.ps = r.s
r.s = ARGV[4]
r.v = r.v + 1
r.o = cjson.null
r.e = cjson.null
r.res = f.res
r.err = f.err
r.why = f.why
r.u = now
return {'ok', store(r, ARGV[6])}
";
