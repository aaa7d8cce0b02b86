// Extension logic tests without a model: the real core.mjs driven through a fake Pi API and
// the OpenCode hooks, spawning tests/js/fake_bridge.sh as the bridge. Run: node --test tests/js
import { test } from "node:test"
import assert from "node:assert/strict"
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"

const HERE = dirname(fileURLToPath(import.meta.url))
const core = await import(join(HERE, "..", "..", "supervisor", "bridges", "core.mjs"))
const FAKE = join(HERE, "fake_bridge.sh")
// the nudge line's one home, which a failed generation delivers
const NUDGE = readFileSync(join(HERE, "..", "..", "supervisor", "nudge.txt"), "utf8").split("\n")[0]

function fakePi() {
  const handlers = {}
  return {
    on(name, fn) {
      handlers[name] = fn
    },
    emit(name, event = {}, ctx = fakeCtx()) {
      return handlers[name](event, ctx)
    },
  }
}

function fakeCtx({ entries = [], header = null, id = "S1" } = {}) {
  return {
    cwd: tmpdir(),
    sessionManager: { getEntries: () => entries, getHeader: () => header, getSessionId: () => id },
  }
}

function setup(mode = "ready", python = FAKE) {
  const dir = mkdtempSync(join(tmpdir(), "wk-bridge-"))
  const log = join(dir, "launches.log")
  const pids = join(dir, "pids")
  const env = { ...process.env, FAKE_MODE: mode, FAKE_LOG: log, FAKE_PIDS: pids }
  const settings = { python, budget: 30, file: join(dir, "watchkeeper.json") }
  const launches = () => (existsSync(log) ? readFileSync(log, "utf8").trim().split("\n").filter(Boolean) : [])
  const cleanup = () => rmSync(dir, { recursive: true, force: true })
  return { dir, env, settings, launches, pids, cleanup }
}

function alive(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
    return stat.slice(stat.lastIndexOf(")") + 2)[0] !== "Z" // a zombie is dead
  } catch {
    return false
  }
}

async function until(cond, what, ms = 10000) {
  const end = Date.now() + ms
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 10))
  }
}

test("two rapid session events launch only the newest generation; it delivers once", async () => {
  const t = setup("ready")
  const pi = fakePi()
  const gens = core.piExtension(pi, { settings: t.settings, env: t.env, argv: ["node", "pi"] })
  await Promise.all([
    pi.emit("session_start", { reason: "startup" }),
    pi.emit("session_start", { reason: "new" }),
  ])
  const first = await pi.emit("before_agent_start", { prompt: "hi" })
  assert.deepEqual(t.launches(), ["clear"])
  assert.equal(first.message.content, "DIGEST-clear\n")
  assert.equal(first.message.display, false)
  assert.equal(first.message.customType, core.PI_MESSAGE_TYPE)
  assert.equal(await pi.emit("before_agent_start", { prompt: "again" }), undefined)
  await gens.shutdown()
  t.cleanup()
})

test("a generation replaced while awaited never delivers; the newer one does", async () => {
  const t = setup("slow")
  const pi = fakePi()
  const gens = core.piExtension(pi, { settings: t.settings, env: t.env, stopGraceMs: 200 })
  await pi.emit("session_start", { reason: "startup" })
  await until(() => existsSync(t.pids), "the slow bridge")
  const waiting = pi.emit("before_agent_start", { prompt: "hi" })
  t.env.FAKE_MODE = "ready"
  await pi.emit("session_compact", {})
  assert.equal(await waiting, undefined) // the stale startup generation delivers nothing
  const next = await pi.emit("before_agent_start", { prompt: "again" })
  assert.equal(next.message.content, "DIGEST-compact\n")
  assert.deepEqual(t.launches(), ["startup", "compact"])
  await gens.shutdown()
  t.cleanup()
})

test("session_compact delivers the re-emit at the next before_agent_start, once", async () => {
  const t = setup("ready")
  const pi = fakePi()
  const gens = core.piExtension(pi, { settings: t.settings, env: t.env })
  await pi.emit("session_start", { reason: "startup" })
  assert.equal((await pi.emit("before_agent_start", {})).message.content, "DIGEST-startup\n")
  await pi.emit("session_compact", {})
  assert.equal((await pi.emit("before_agent_start", {})).message.content, "DIGEST-compact\n")
  assert.equal(await pi.emit("before_agent_start", {}), undefined)
  await gens.shutdown()
  t.cleanup()
})

test("shutdown leaves no process, TERM-ignoring grandchildren included", async () => {
  const t = setup("slow")
  const pi = fakePi()
  core.piExtension(pi, { settings: t.settings, env: t.env, stopGraceMs: 200 })
  await pi.emit("session_start", { reason: "startup" })
  await until(() => existsSync(t.pids), "the slow bridge")
  const pids = readFileSync(t.pids, "utf8").trim().split("\n").map(Number)
  assert.equal(pids.length, 3)
  assert.ok(pids.every(alive))
  await pi.emit("session_shutdown", {})
  await until(() => !pids.some(alive), "every process to be gone", 5000)
  t.cleanup()
})

test("a spawn error delivers the one-line fallback", async () => {
  const t = setup("ready", join(tmpdir(), "no-such-dir-wk", "python"))
  const pi = fakePi()
  const gens = core.piExtension(pi, { settings: t.settings, env: t.env })
  await pi.emit("session_start", { reason: "startup" })
  const got = await pi.emit("before_agent_start", {})
  assert.equal(got.message.content, NUDGE)
  assert.ok(!NUDGE.includes("\n"))
  assert.match(NUDGE, /^\u2063SUPERVISE_OP: .*supervise digest --session-start/)
  await gens.shutdown()
  t.cleanup()
})

test("a failed or unreadable bridge delivers the fallback", async () => {
  for (const mode of ["failed", "garbage"]) {
    const t = setup(mode)
    const pi = fakePi()
    const gens = core.piExtension(pi, { settings: t.settings, env: t.env })
    await pi.emit("session_start", { reason: "startup" })
    assert.equal((await pi.emit("before_agent_start", {})).message.content, NUDGE, mode)
    await gens.shutdown()
    t.cleanup()
  }
})

test("an ineligible (gated) session delivers nothing", async () => {
  const t = setup("ineligible")
  const pi = fakePi()
  const gens = core.piExtension(pi, { settings: t.settings, env: t.env })
  await pi.emit("session_start", { reason: "startup" })
  assert.equal(await pi.emit("before_agent_start", {}), undefined)
  assert.deepEqual(t.launches(), ["startup"])
  await gens.shutdown()
  t.cleanup()
})

test("reload starts no generation", async () => {
  const t = setup("ready")
  const pi = fakePi()
  const gens = core.piExtension(pi, { settings: t.settings, env: t.env })
  await pi.emit("session_start", { reason: "reload" })
  assert.equal(await pi.emit("before_agent_start", {}), undefined)
  assert.deepEqual(t.launches(), [])
  await gens.shutdown()
  t.cleanup()
})

test("Pi sources: startup with history is resume, or fork with a parent session", () => {
  const msg = [{ type: "message" }]
  const m = (reason, opts, argv = ["node", "pi"]) => core.mapPiSource({ reason }, fakeCtx(opts), argv)
  assert.equal(m("startup", {}), "startup")
  assert.equal(m("startup", { entries: [{ type: "model_change" }] }), "startup")
  assert.equal(m("startup", { entries: msg }), "resume")
  assert.equal(m("startup", { entries: msg }, ["node", "pi", "-c"]), "resume")
  assert.equal(m("startup", { entries: msg, header: { parentSession: "/x.jsonl" } }), "fork")
  assert.equal(m("startup", { entries: msg }, ["node", "pi", "--fork", "f.jsonl"]), "fork")
  assert.equal(m("startup", {}, ["node", "pi", "-c"]), "startup") // argv alone proves nothing
  assert.equal(m("new", {}), "clear")
  assert.equal(m("resume", {}), "resume")
  assert.equal(m("fork", {}), "fork")
  assert.equal(m("reload", {}), null)
})

test("the cap cuts on a UTF-8 character boundary and appends the marker", () => {
  const text = "x" + "\u00e9\u4e2d\u{1F600}".repeat(100000) // 1-, 2-, 3- and 4-byte characters
  for (const max of [1000, 1001, 1002, 1003, core.MAX_BYTES]) {
    const { text: out, cut } = core.capUtf8(text, max)
    assert.ok(cut)
    assert.ok(out.endsWith(core.TRUNCATION_MARKER))
    const body = out.slice(0, -core.TRUNCATION_MARKER.length)
    assert.ok(!body.includes("\uFFFD"))
    const bytes = Buffer.byteLength(body, "utf8")
    assert.ok(bytes <= max && bytes > max - 4, `${bytes} for ${max}`)
    assert.ok(text.startsWith(body))
  }
  assert.deepEqual(core.capUtf8("short"), { text: "short", cut: false })
  assert.match(core.TRUNCATION_MARKER, /unread/)
})

test("OpenCode: the text joins the existing system message (one system message per request)", () => {
  const one = ["You are opencode.\n"]
  core.joinSystem(one, "DIGEST\n")
  assert.deepEqual(one, ["You are opencode.\n\nDIGEST\n"])
  core.joinSystem(one, "DIGEST\n") // idempotent
  assert.deepEqual(one, ["You are opencode.\n\nDIGEST\n"])
  const two = ["header", "body"] // OpenCode's cached two-part prompt: still two, not three
  core.joinSystem(two, "DIGEST")
  assert.deepEqual(two, ["header", "body\n\nDIGEST"])
  const none = []
  core.joinSystem(none, "DIGEST")
  assert.deepEqual(none, ["DIGEST"])
  const odd = ["base", { not: "a string" }]
  core.joinSystem(odd, "DIGEST")
  assert.deepEqual(odd, ["base\n\nDIGEST", { not: "a string" }])
})

test("OpenCode: internal calls get nothing; one join per request; compaction refreshes", async () => {
  const t = setup("ready")
  const hooks = core.openCodeHooks({ directory: tmpdir() }, { settings: t.settings, env: t.env })
  const call = async (system, input = { sessionID: "ses_1" }) => {
    const out = { system: [...system] }
    await hooks["experimental.chat.system.transform"](input, out)
    return out.system
  }
  assert.deepEqual(await call(["You are a title generator. You output ONLY a thread title."]),
    ["You are a title generator. You output ONLY a thread title."])
  assert.deepEqual(await call(["base"], { model: {} }), ["base"]) // no session: internal
  assert.deepEqual(await call(["base"]), ["base\n\nDIGEST-startup\n"])
  assert.deepEqual(await call(["base"]), ["base\n\nDIGEST-startup\n"])
  assert.deepEqual(await call(["base\n\nDIGEST-startup\n"]), ["base\n\nDIGEST-startup\n"]) // no duplicate
  assert.deepEqual(await call(["You are a context summarization agent. ..."]), ["You are a context summarization agent. ..."])
  await hooks["experimental.session.compacting"]({ sessionID: "ses_1" }, { context: [] })
  await hooks.event({ event: { type: "session.compacted", properties: { sessionID: "ses_1" } } })
  assert.deepEqual(await call(["base"]), ["base\n\nDIGEST-compact\n"])
  await hooks.event({ event: { type: "session.created", properties: { info: { id: "ses_2", parentID: "ses_1" } } } })
  assert.deepEqual(await call(["base"], { sessionID: "ses_2" }), ["base"]) // a subagent session
  assert.deepEqual(t.launches(), ["startup", "compact"])
  await hooks._shutdown()
  t.cleanup()
})

test("OpenCode: a model call waits at most the budget", async () => {
  const t = setup("slow")
  t.settings.budget = 0.3
  const hooks = core.openCodeHooks({ directory: tmpdir() }, { settings: t.settings, env: t.env, stopGraceMs: 200 })
  const out = { system: ["base"] }
  await hooks["experimental.chat.system.transform"]({ sessionID: "ses_1" }, out)
  assert.deepEqual(out.system, ["base"])
  await until(() => existsSync(t.pids), "the slow bridge")
  const pids = readFileSync(t.pids, "utf8").trim().split("\n").map(Number)
  await hooks._shutdown()
  await until(() => !pids.some(alive), "every process to be gone", 5000)
  t.cleanup()
})

test("Pi: every turn asks for the per-turn work; what it brings is delivered with that turn, once", async () => {
  const t = setup("ready")
  const turnFile = join(t.dir, "turn.txt")
  const turns = join(t.dir, "turns.log")
  const env = { ...t.env, FAKE_TURN: turnFile, FAKE_TURNS: turns }
  const pi = fakePi()
  const gens = core.piExtension(pi, { settings: t.settings, env })
  await pi.emit("session_start", { reason: "startup" })
  assert.equal((await pi.emit("before_agent_start", {})).message.content, "DIGEST-startup\n")
  assert.equal(await pi.emit("before_agent_start", {}), undefined) // nothing new
  writeFileSync(turnFile, "DEFERRED-RESULT\n")
  const got = await pi.emit("before_agent_start", {})
  assert.equal(got.message.content, "DEFERRED-RESULT")
  assert.equal(got.message.details.kind, "turn")
  assert.equal(await pi.emit("before_agent_start", {}), undefined) // delivered once
  const asks = readFileSync(turns, "utf8").trim().split("\n")
  assert.equal(asks.length, 4)
  assert.ok(asks.every((a) => a.endsWith("hook pi --event prompt")))
  await gens.shutdown()
  t.cleanup()
})

const ours = (id, mode) => ({ type: "custom_message", id, customType: core.PI_MESSAGE_TYPE, content: "x", details: { kind: "ready", source: mode === "reemit" ? "compact" : "startup", mode } })
const said = (id) => ({ type: "message", id, message: { role: "user" } })

test("Pi context: only our messages the model sees now (kept by or after the last compaction)", () => {
  const ctxOf = (entries) => ({ sessionManager: { getBranch: () => entries } })
  const ids = (entries) => core.piContextMessages(ctxOf(entries)).map((e) => e.id)
  assert.deepEqual(ids([ours("d", "full"), said("u1")]), ["d"])
  const dropped = [ours("d", "full"), said("u1"), said("u2"), { type: "compaction", id: "c", firstKeptEntryId: "u2" }]
  assert.deepEqual(ids(dropped), [])
  const kept = [ours("d", "full"), said("u1"), { type: "compaction", id: "c", firstKeptEntryId: "d" }]
  assert.deepEqual(ids(kept), ["d"])
  assert.deepEqual(ids([...dropped, ours("r", "reemit")]), ["r"])
  assert.equal(core.piDigestInContext(ctxOf([ours("n", "nudge")])), false)
  assert.equal(core.piDigestInContext(ctxOf(kept)), true)
  assert.deepEqual(core.piContextMessages({ sessionManager: { getBranch: () => { throw new Error("x") } } }), [])
  assert.deepEqual(core.piContextMessages({}), [])
})

test("Pi resume: nothing when the context holds our digest or nudge; a generation when not", async () => {
  const t = setup("ready")
  const pi = fakePi()
  const gens = core.piExtension(pi, { settings: t.settings, env: t.env, argv: ["node", "pi", "-c"] })
  const held = { entries: [ours("d", "full"), said("u1")] }
  const ctx = { ...fakeCtx(held), sessionManager: { ...fakeCtx(held).sessionManager, getBranch: () => held.entries } }
  await pi.emit("session_start", { reason: "startup" }, ctx)
  assert.equal(await pi.emit("before_agent_start", { prompt: "hi" }, ctx), undefined)
  const nudged = { entries: [said("u0"), ours("n", "nudge"), said("u1")] }
  const ctx2 = { ...fakeCtx(nudged), sessionManager: { ...fakeCtx(nudged).sessionManager, getBranch: () => nudged.entries } }
  await pi.emit("session_start", { reason: "startup" }, ctx2)
  assert.deepEqual(t.launches(), [], "nudges never accumulate")
  const lost = { entries: [ours("d", "full"), said("u1"), said("u2"), { type: "compaction", id: "c", firstKeptEntryId: "u2" }] }
  const ctx3 = { ...fakeCtx(lost), sessionManager: { ...fakeCtx(lost).sessionManager, getBranch: () => lost.entries } }
  await pi.emit("session_start", { reason: "startup" }, ctx3)
  assert.equal((await pi.emit("before_agent_start", { prompt: "hi" }, ctx3)).message.content, "DIGEST-resume\n")
  assert.deepEqual(t.launches(), ["resume"])
  await gens.shutdown()
  t.cleanup()
})

test("OpenCode: a turn's text rides on every later request, once; asks are throttled", async () => {
  const t = setup("ready")
  const turnFile = join(t.dir, "turn.txt")
  const turns = join(t.dir, "turns.log")
  const env = { ...t.env, FAKE_TURN: turnFile, FAKE_TURNS: turns }
  const hooks = core.openCodeHooks({ directory: tmpdir() }, { settings: t.settings, env, turnIntervalMs: 0 })
  const call = async () => {
    const out = { system: ["base"] }
    await hooks["experimental.chat.system.transform"]({ sessionID: "ses_1" }, out)
    return out.system
  }
  assert.deepEqual(await call(), ["base\n\nDIGEST-startup\n"])
  writeFileSync(turnFile, "DEFERRED-RESULT\n")
  assert.deepEqual(await call(), ["base\n\nDIGEST-startup\n\nDEFERRED-RESULT"])
  assert.deepEqual(await call(), ["base\n\nDIGEST-startup\n\nDEFERRED-RESULT"]) // once per request
  assert.equal(readFileSync(turns, "utf8").trim().split("\n").length, 3)
  await hooks._shutdown()
  const slow = core.openCodeHooks({ directory: tmpdir() }, { settings: t.settings, env, turnIntervalMs: 60000 })
  const out = { system: ["base"] }
  await slow["experimental.chat.system.transform"]({ sessionID: "ses_9" }, out)
  await slow["experimental.chat.system.transform"]({ sessionID: "ses_9" }, out)
  assert.equal(readFileSync(turns, "utf8").trim().split("\n").length, 4) // one ask per interval
  await slow._shutdown()
  t.cleanup()
})

test("Pi compact: the re-emit is dropped when the startup digest survived the compaction", async () => {
  const t = setup("ready")
  const pi = fakePi()
  const gens = core.piExtension(pi, { settings: t.settings, env: t.env, argv: ["node", "pi"] })
  const kept = { entries: [ours("d", "full"), said("u1"), { type: "compaction", id: "c", firstKeptEntryId: "d" }] }
  const ctx = { ...fakeCtx(kept), sessionManager: { ...fakeCtx(kept).sessionManager, getBranch: () => kept.entries } }
  await pi.emit("session_compact", {}, ctx)
  assert.equal(await pi.emit("before_agent_start", { prompt: "after" }, ctx), undefined)
  const lost = { entries: [ours("d", "full"), said("u1"), said("u2"), { type: "compaction", id: "c", firstKeptEntryId: "u2" }] }
  const ctx2 = { ...fakeCtx(lost), sessionManager: { ...fakeCtx(lost).sessionManager, getBranch: () => lost.entries } }
  await pi.emit("session_compact", {}, ctx2)
  const got = await pi.emit("before_agent_start", { prompt: "after" }, ctx2)
  assert.equal(got.message.content, "DIGEST-compact\n")
  assert.deepEqual(t.launches(), ["compact", "compact"], "the compact generation still runs (nested re-arm)")
  await gens.shutdown()
  t.cleanup()
})

test("two copies of the bridge in one load: the first serves, the other stands down", async () => {
  // Pi: the project's extension and the user's both load (one `events` bus per load);
  // OpenCode: the project plugin and the user's share the instance's `client`.
  const events = {}
  const first = fakePi(), second = fakePi()
  first.events = events
  second.events = events
  const t = setup("ready")
  try {
    assert.notEqual(core.piExtension(first, { settings: t.settings, env: t.env }), null)
    assert.equal(core.piExtension(second, { settings: t.settings, env: t.env }), null)
    const other = fakePi()
    other.events = {} // a later load (/reload) gets a new bus: served again
    assert.notEqual(core.piExtension(other, { settings: t.settings, env: t.env }), null)
    const client = {}
    const a = core.openCodeHooks({ directory: tmpdir(), client }, { settings: t.settings, env: t.env })
    const b = core.openCodeHooks({ directory: tmpdir(), client }, { settings: t.settings, env: t.env })
    assert.ok(a["experimental.chat.system.transform"])
    assert.deepEqual(b, {})
  } finally {
    t.cleanup()
  }
})

test("watchkeeper.json planted as a FIFO, a link to /dev/zero, huge or deep: no settings, no wait", async () => {
  const { execFileSync } = await import("node:child_process")
  const { symlinkSync, truncateSync } = await import("node:fs")
  const plants = {
    fifo: (f) => execFileSync("mkfifo", [f]),
    devzero: (f) => symlinkSync("/dev/zero", f),
    huge: (f) => { writeFileSync(f, '{"python": "/bin/planted"'); truncateSync(f, 3 * 2 ** 30) },
    deep: (f) => writeFileSync(f, "[".repeat(200000) + "]".repeat(200000)),
    list: (f) => writeFileSync(f, "[1, 2]"),
  }
  for (const [kind, plant] of Object.entries(plants)) {
    const dir = mkdtempSync(join(tmpdir(), `wk-settings-${kind}-`))
    try {
      plant(join(dir, "watchkeeper.json"))
      const settings = core.loadSettings(dir)
      assert.equal(settings.python, "", kind)
      assert.equal(settings.budget, 120, kind)
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  }
  const dir = mkdtempSync(join(tmpdir(), "wk-settings-ok-"))
  try {
    writeFileSync(join(dir, "watchkeeper.json"), '{"python": "/usr/bin/python3", "budget": 30}')
    assert.deepEqual({ ...core.loadSettings(dir), file: "" }, { python: "/usr/bin/python3", budget: 30, optIn: false, nudge: "", file: "" })
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
})

test("a user-scope watchkeeper.json (opt_in) puts --opt-in on every call of ours", async () => {
  const dir = mkdtempSync(join(tmpdir(), "wk-optin-"))
  try {
    writeFileSync(join(dir, "watchkeeper.json"), JSON.stringify({ python: "/x/python", budget: 30, opt_in: true }))
    const user = core.loadSettings(dir)
    assert.equal(user.optIn, true)
    assert.ok(core.bridgeArgv(user, "pi", "startup", "S1", "/p").includes("--opt-in"))
    writeFileSync(join(dir, "watchkeeper.json"), JSON.stringify({ python: "/x/python", budget: 30 }))
    const project = core.loadSettings(dir)
    assert.equal(project.optIn, false)
    assert.ok(!core.bridgeArgv(project, "pi", "startup", "S1", "/p").includes("--opt-in"))
    const seen = []
    const spawn = (cmd, args) => {
      seen.push(args)
      throw new Error("not spawned")
    }
    await core.hookText(user, "pi", "prompt", {}, "/p", { spawn })
    await core.hookText(project, "pi", "post-tool", {}, "/p", { spawn })
    assert.deepEqual(seen.map((a) => a.includes("--opt-in")), [true, false])
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
})

test("a placed copy delivers the nudge line its watchkeeper.json carries", async () => {
  // `supervise install` writes the line into watchkeeper.json: a copy of core.mjs has no
  // package beside it. A line there wins over the package's file.
  const dir = mkdtempSync(join(tmpdir(), "wk-placed-"))
  const placed = "\u2063SUPERVISE_OP: v9 session-start: PLACED LINE"
  writeFileSync(join(dir, "watchkeeper.json"), JSON.stringify({ python: "/x/python", budget: 5, nudge: placed }))
  assert.equal(core.loadSettings(dir).nudge, placed)
  assert.equal(core.deliverable({ kind: "failed" }, core.loadSettings(dir).nudge), placed)
  writeFileSync(join(dir, "watchkeeper.json"), JSON.stringify({ python: "/x/python", nudge: "plain prose" }))
  assert.equal(core.loadSettings(dir).nudge, "") // not an operational line: not taken
  assert.equal(core.loadSettings(dir).nudge, "") // no package beside it: nothing to say
  assert.equal(core.deliverable({ kind: "failed" }, ""), null)
  assert.equal(core.loadSettings(join(HERE, "..", "..", "supervisor", "bridges")).nudge, NUDGE)
  rmSync(dir, { recursive: true, force: true })
})
