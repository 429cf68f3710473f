#!/usr/bin/env node
// Test fixture (tests/test_js_board.py): written independently, by a developer who had
// only SPEC 10 (/work/shared/SPEC.md) and docs/protocol.md, never taskboard's code. It is
// kept as it was written, with no behaviour changes, as proof that a board in another
// language by someone else is checked: the correct board passes and each --bug is caught.
// Independent task board speaking the taskboard "board protocol" (SPEC 10).
// Storage: one JSON file; every operation is one read-modify-write under an
// exclusive lock file (created with O_EXCL), so separate processes race for real.
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const crypto = require('crypto');
const readline = require('readline');

// ---------- command line ----------
const BUGS = ['release-ignores-token', 'renew-expired', 'claim-not-atomic'];
let bug = null;
{
  const a = process.argv.slice(2);
  for (let i = 0; i < a.length; i++) {
    if (a[i] === '--bug') bug = a[++i];
    else if (a[i].startsWith('--bug=')) bug = a[i].slice(6);
    else { log(`unknown argument ${a[i]}`); process.exit(2); }
  }
  if (bug !== null && !BUGS.includes(bug)) { log(`unknown bug ${bug}; one of ${BUGS.join(', ')}`); process.exit(2); }
}

function log(msg) { process.stderr.write(`[board.js ${process.pid}] ${msg}\n`); }

// ---------- errors ----------
class BoardError extends Error {
  constructor(code, message) { super(message); this.code = code; }
}
const err = (code, msg) => new BoardError(code, msg);

// ---------- sleeping without the event loop ----------
const sab = new Int32Array(new SharedArrayBuffer(4));
function sleepMs(ms) { Atomics.wait(sab, 0, 0, ms); }

// ---------- per-process state ----------
let storagePath = null;   // the JSON file
let owner = false;        // this process ran init: it removes the storage on close
let clockMode = null;     // 'manual' | 'wall'
let manualNow = null;     // microseconds, manual mode only

function now() {
  if (clockMode === 'wall') return Date.now() * 1000;
  return manualNow;
}

// ---------- the lock ----------
function lockPath() { return storagePath + '.lock'; }

function pidAlive(pid) {
  try { process.kill(pid, 0); return true; } catch (e) { return e.code === 'EPERM'; }
}

function acquire() {
  const lp = lockPath();
  const deadline = Date.now() + 8000;
  let spins = 0;
  for (;;) {
    try {
      const fd = fs.openSync(lp, 'wx');
      fs.writeSync(fd, String(process.pid));
      fs.closeSync(fd);
      return;
    } catch (e) {
      if (e.code !== 'EEXIST') throw e;
    }
    spins++;
    // A holder that died (killed by the checker mid-operation) leaves a stale lock.
    if (spins % 200 === 0) {
      try {
        const pid = parseInt(fs.readFileSync(lp, 'utf8'), 10);
        if (pid && !pidAlive(pid)) { log(`breaking stale lock of dead pid ${pid}`); fs.unlinkSync(lp); continue; }
      } catch (_) { /* vanished in between: retry */ }
    }
    if (Date.now() > deadline) throw new Error(`could not acquire ${lp}`);
    if (spins > 20) sleepMs(spins > 200 ? 2 : 0.2);
  }
}

function release_lock() {
  try { fs.unlinkSync(lockPath()); } catch (e) { log(`unlock: ${e.message}`); }
}

function readDb() { return JSON.parse(fs.readFileSync(storagePath, 'utf8')); }

function writeDb(db) {
  const tmp = `${storagePath}.${process.pid}.tmp`;
  fs.writeFileSync(tmp, JSON.stringify(db));
  fs.renameSync(tmp, storagePath);
}

// Run fn(db) under the lock; write the db back only if fn returns normally and
// asks for it. A rejected operation (exception) writes nothing.
function transact(fn) {
  acquire();
  try {
    const db = readDb();
    const res = fn(db);
    if (res && res.write) writeDb(db);
    return res ? res.value : undefined;
  } finally {
    release_lock();
  }
}

// ---------- board semantics ----------
function getTask(db, id) {
  const t = db.tasks.find((x) => x.id === id);
  if (!t) throw err('not_found', `no task ${JSON.stringify(id)}`);
  return t;
}

function isLive(lease, t) { return lease.until === null || t < lease.until; }

function untilFor(ttl, t) {
  if (!Number.isInteger(ttl) || ttl < 0) throw err('invalid', `bad ttl ${JSON.stringify(ttl)}`);
  return ttl === 0 ? null : t + ttl;
}

function newToken() { return crypto.randomBytes(16).toString('hex'); }

function clone(x) { return JSON.parse(JSON.stringify(x)); }

// The checks of 3.1, in order. Returns nothing; throws on rejection.
function claimChecks(db, id, agent, t) {
  const task = getTask(db, id);
  if (task.state === 'done') throw err('terminal', `task ${JSON.stringify(id)} is done`);
  for (const d of task.deps) {
    const dt = db.tasks.find((x) => x.id === d);
    if (!dt || dt.state !== 'done') throw err('blocked', `dependency ${JSON.stringify(d)} of ${JSON.stringify(id)} is not done`);
  }
  if (task.state === 'claimed' && task.lease && isLive(task.lease, t))
    throw err('taken', `task ${JSON.stringify(id)} is held by a live lease of ${JSON.stringify(task.owner)}`);
  if (typeof agent !== 'string' || agent === '') throw err('invalid', 'empty agent');
}

function claimApply(db, id, agent, ttl, t) {
  const task = getTask(db, id);
  const until = untilFor(ttl, t);
  const fence = (db.maxFence[id] || 0) + 1;
  db.maxFence[id] = fence;
  task.state = 'claimed';
  task.owner = agent;
  task.lease = { token: newToken(), fence, until };
  task.seq += 1;
  return clone(task);
}

function opClaim(req) {
  const { task: id, agent, ttl } = req;
  if (bug === 'claim-not-atomic') {
    // Bug: check and write are two separate file transactions; only an in-process
    // flag keeps them together, which says nothing about other processes.
    if (claimInProgress) throw new Error('re-entrant claim');
    claimInProgress = true;
    try {
      transact((db) => { claimChecks(db, id, agent, now()); untilFor(ttl, 0); return null; });
      return transact((db) => ({ write: true, value: claimApply(db, id, agent, ttl, now()) }));
    } finally { claimInProgress = false; }
  }
  return transact((db) => {
    const t = now();
    claimChecks(db, id, agent, t);
    untilFor(ttl, t);
    return { write: true, value: claimApply(db, id, agent, ttl, t) };
  });
}
let claimInProgress = false;

function checkHolder(task, token) {
  if (task.state !== 'claimed' || !task.lease) throw err('lease_lost', `task ${JSON.stringify(task.id)} is not claimed`);
  if (task.lease.token !== token) throw err('lease_lost', `token is not the current lease of ${JSON.stringify(task.id)}`);
}

// release / complete / fail: 3.2, 3.3, 3.6. An expired lease with the current
// token is accepted (3.4 allows either).
function finish(req, newState) {
  return transact((db) => {
    const task = getTask(db, req.task);
    if (bug === 'release-ignores-token' && newState === 'open') {
      if (task.state !== 'claimed') throw err('lease_lost', `task ${JSON.stringify(task.id)} is not claimed`);
    } else {
      checkHolder(task, req.token);
    }
    task.state = newState;
    task.owner = '';
    task.lease = null;
    task.seq += 1;
    return { write: true, value: undefined };
  });
}

function opRenew(req) {
  return transact((db) => {
    const t = now();
    const task = getTask(db, req.task);
    checkHolder(task, req.token);
    if (bug !== 'renew-expired' && !isLive(task.lease, t))
      throw err('lease_lost', `lease of ${JSON.stringify(task.id)} expired`);
    task.lease.until = untilFor(req.ttl, t);
    task.seq += 1;
    return { write: true, value: clone(task) };
  });
}

// ---------- protocol ----------
function normTask(t) {
  return {
    id: String(t.id),
    title: typeof t.title === 'string' ? t.title : '',
    deps: Array.isArray(t.deps) ? t.deps.map(String) : [],
    state: t.state || 'open',
    owner: typeof t.owner === 'string' ? t.owner : '',
    lease: t.lease ? { token: t.lease.token, fence: t.lease.fence, until: t.lease.until === undefined ? null : t.lease.until } : null,
    seq: Number.isInteger(t.seq) ? t.seq : 0,
  };
}

function opInit(req) {
  if (storagePath) throw new Error('already initialised');
  if (req.clock !== 'manual' && req.clock !== 'wall') throw new Error(`bad clock ${req.clock}`);
  clockMode = req.clock;
  manualNow = req.now;
  const tasks = (req.tasks || []).map(normTask);
  const maxFence = {};
  for (const t of tasks) maxFence[t.id] = t.lease ? t.lease.fence : 0;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'indep-board-'));
  storagePath = path.join(dir, 'board.json');
  owner = true;
  writeDb({ clock: clockMode, now: req.now, tasks, maxFence });
  return { storage: storagePath };
}

function opConnect(req) {
  if (storagePath) throw new Error('already initialised');
  if (typeof req.storage !== 'string' || !fs.existsSync(req.storage)) throw new Error(`no storage ${req.storage}`);
  storagePath = req.storage;
  owner = false;
  // connect carries no clock: take the mode (and, in manual mode, the latest
  // time any process heard) from the storage.
  const db = transact((d) => ({ value: d }));
  clockMode = db.clock;
  manualNow = db.now;
  return {};
}

function opSetTime(req) {
  if (!Number.isInteger(req.now)) throw new Error(`bad now ${req.now}`);
  if (clockMode === 'manual') {
    if (manualNow !== null && req.now < manualNow) log(`set_time went backwards: ${req.now} < ${manualNow}`);
    manualNow = req.now;
    // Record it for processes that connect later.
    transact((db) => {
      if (db.now === null || req.now > db.now) { db.now = req.now; return { write: true }; }
      return null;
    });
  }
  return {};
}

function removeStorage() {
  if (!owner || !storagePath) return;
  const dir = path.dirname(storagePath);
  try { fs.rmSync(dir, { recursive: true, force: true }); } catch (e) { log(`remove storage: ${e.message}`); }
  owner = false;
}

function needStorage() { if (!storagePath) throw new Error('no init/connect yet'); }

function handle(req) {
  switch (req.op) {
    case 'hello':
      if (req.protocol !== 1) throw new Error(`unsupported protocol ${req.protocol}`);
      return { protocol: 1, name: bug ? `indep-js(${bug})` : 'indep-js', ops: ['renew', 'fail', 'connect'], durable: true };
    case 'init': return opInit(req);
    case 'connect': return opConnect(req);
    case 'set_time': needStorage(); return opSetTime(req);
    case 'list': needStorage(); return { tasks: transact((db) => ({ value: db.tasks })) };
    case 'claim': needStorage(); return { task: opClaim(req) };
    case 'renew': needStorage(); return { task: opRenew(req) };
    case 'release': needStorage(); finish(req, 'open'); return {};
    case 'complete': needStorage(); finish(req, 'done'); return {};
    case 'fail': needStorage(); finish(req, 'failed'); return {};
    case 'close': removeStorage(); return {};
    default: throw err('unsupported', `op ${JSON.stringify(req.op)} is not served`);
  }
}

function send(obj, cb) { process.stdout.write(JSON.stringify(obj) + '\n', cb); }

const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
rl.on('line', (line) => {
  if (line.trim() === '') return;
  let req;
  try { req = JSON.parse(line); } catch (e) { log(`bad request line: ${line.slice(0, 200)}`); return; }
  const id = req && req.id;
  let answer;
  try {
    answer = Object.assign({ id, ok: true }, handle(req));
  } catch (e) {
    if (e instanceof BoardError) answer = { id, ok: false, error: e.code, message: e.message };
    else { log(`internal error on ${req.op}: ${e.stack}`); answer = { id, ok: false, error: 'internal', message: String(e.message) }; }
  }
  if (req.op === 'close') { rl.close(); send(answer, () => process.exit(0)); }
  else send(answer);
});
rl.on('close', () => { removeStorage(); });
process.on('SIGTERM', () => { removeStorage(); process.exit(0); });
