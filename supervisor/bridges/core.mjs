// watchkeeper extension-bridge core, shared by the Pi extension and the OpenCode plugin.
//
// Plain ES module, no dependencies (Pi loads it through jiti, OpenCode through Bun, the tests
// through node). One *generation* = one `supervise bridge` child process for one session
// event; the contract of that process is docs/bridge-protocol.md. Installed by
// `supervise install pi|opencode` next to a small `watchkeeper.json` holding the absolute
// interpreter path, so nothing here depends on PATH.

import { spawn as nodeSpawn, spawnSync } from "node:child_process"
import { closeSync, constants, existsSync, fstatSync, openSync, readFileSync, readSync, readdirSync, statSync } from "node:fs"
import { dirname, join, resolve as resolvePath } from "node:path"
import { fileURLToPath } from "node:url"

export const PROTOCOL = 1
/** Bytes of digest text delivered at most (the model's context is not a log file). */
export const MAX_BYTES = 512 * 1024
/** Bytes of bridge stdout read at most; past it the generation failed (a broken bridge). */
export const MAX_STDOUT = 32 * 1024 * 1024
/** Appended when the digest was cut to MAX_BYTES. */
export const TRUNCATION_MARKER =
  "\n\nSESSION-START DELIVERY TRUNCATED - the digest exceeded 512 KiB and was cut here. " +
  "Treat everything that is missing as unread: run `supervise digest` or inspect the named files directly before acting on it."
/** Milliseconds a stopping generation gets after SIGTERM before SIGKILL (the bridge's own
 *  engine kills its stage trees TERM-then-KILL within its grace, default 1 s). */
export const STOP_GRACE_MS = 3000
/** Milliseconds between two per-turn asks of one OpenCode session (deferred results,
 *  changed instruction files): a tool loop makes many model calls per user turn. */
export const TURN_INTERVAL_MS = 1000
/** Milliseconds a generation may run beyond the budget before it counts as failed. */
export const BUDGET_MARGIN_MS = 10000

const HERE = (() => {
  try {
    return dirname(fileURLToPath(import.meta.url))
  } catch {
    return process.cwd()
  }
})()

/** Bytes of `watchkeeper.json` read at most (ours is a few hundred). */
export const SETTINGS_CAP = 64 * 1024

/**
 * The text of the small file `file`, or null when it is not a regular file of at most `cap`
 * bytes. Never blocks: a FIFO planted in a project's extension folder would otherwise hold
 * the harness at load, and a link to /dev/zero never ends (stat first, then opened
 * O_NONBLOCK and fstat-ed, so a file swapped in between is judged too).
 */
export function readSmallFile(file, cap = SETTINGS_CAP) {
  if (!statSync(file).isFile()) return null
  const fd = openSync(file, constants.O_RDONLY | (constants.O_NONBLOCK ?? 0))
  try {
    const st = fstatSync(fd)
    if (!st.isFile() || st.size > cap) return null
    const buf = Buffer.alloc(cap + 1)
    let got = 0
    for (let n = 1; n > 0 && got <= cap; got += n) n = readSync(fd, buf, got, cap + 1 - got, null)
    return got > cap ? null : buf.subarray(0, got).toString("utf8")
  } finally {
    closeSync(fd)
  }
}

/**
 * The one line a failed generation delivers: the nudge line, whose one home is the package's
 * `supervisor/nudge.txt` (without its newline). `supervise install` writes it into the
 * `watchkeeper.json` beside a placed copy of this file (`data.nudge`); loaded from the
 * package itself (`dir` is its `bridges/` folder), it is read from the file. Only an
 * operational line is taken (U+2063 `SUPERVISE_OP: `, one line, at most 1 KiB); "" when
 * neither has one: a failed generation then delivers nothing.
 */
export function readNudge(dir = HERE, data = {}) {
  const line = (text) => {
    const first = String(text).split("\n")[0]
    return first.startsWith("\u2063SUPERVISE_OP: ") && first.length <= 1024 ? first : ""
  }
  if (typeof data.nudge === "string" && line(data.nudge)) return line(data.nudge)
  try {
    return line(readSmallFile(join(dir, "..", "nudge.txt"), 4096) ?? "")
  } catch {
    return ""
  }
}

/** Read `watchkeeper.json` from `dir` (default: beside this file): {python, budget, optIn,
 *  nudge, file}; a file that is not a small regular file of JSON is no settings. `opt_in: true`
 *  (written by `supervise install --scope user`) makes every call of ours carry `--opt-in`:
 *  Python then stays silent, creating nothing, in a project that did not opt in
 *  (supervisor/session/_gates.py opt_in_silence). */
export function loadSettings(dir = HERE) {
  const file = join(dir, "watchkeeper.json")
  let data = {}
  try {
    const text = readSmallFile(file)
    data = text === null ? {} : JSON.parse(text)
  } catch {
    data = {}
  }
  if (data === null || typeof data !== "object") data = {}
  const budget = Number(process.env.SUPERVISE_TIMEOUT || data.budget || 120)
  return {
    python: typeof data.python === "string" && data.python ? data.python : "",
    budget: Number.isFinite(budget) && budget > 0 ? budget : 120,
    optIn: data.opt_in === true,
    nudge: readNudge(dir, data),
    file,
  }
}

/** The nudge line of `settings` (as loadSettings gives it), else the package's beside this file. */
function nudgeOf(settings) {
  return typeof settings?.nudge === "string" && settings.nudge ? settings.nudge : readNudge()
}

/** The argv of one generation: `<python> -I -m supervisor bridge --harness H --source S ...`
 * (-I, isolated: the harness's PYTHONPATH, PYTHONHOME, PYTHONSTARTUP and user site-packages
 * cannot shadow the package). */
export function bridgeArgv(settings, harness, source, sessionId, cwd) {
  const argv = [settings.python, "-I", "-m", "supervisor", "bridge", "--harness", harness, "--source", source]
  if (sessionId) argv.push("--session-id", String(sessionId))
  if (cwd) argv.push("--cwd", String(cwd))
  if (settings.optIn) argv.push("--opt-in")
  return argv
}

/**
 * Cut `text` to at most `max` UTF-8 bytes on a character boundary: cut the bytes, then back
 * up over continuation bytes (10xxxxxx) BEFORE decoding, so no character is split and no
 * U+FFFD appears. Returns {text, cut}; a cut text ends with TRUNCATION_MARKER.
 */
export function capUtf8(text, max = MAX_BYTES) {
  const buf = Buffer.from(text, "utf8")
  if (buf.length <= max) return { text, cut: false }
  let end = max
  while (end > 0 && (buf[end] & 0xc0) === 0x80) end--
  return { text: buf.subarray(0, end).toString("utf8") + TRUNCATION_MARKER, cut: true }
}

/** What a settled generation delivers to the model, or null for nothing; a failed one
 *  delivers `nudge` (the nudge line, readNudge), or nothing without one. */
export function deliverable(result, nudge = readNudge()) {
  if (!result) return null
  if (result.kind === "failed") return nudge || null
  if (result.kind !== "ready" || typeof result.text !== "string" || !result.text.trim()) return null
  return capUtf8(result.text).text
}

// ---------------------------------------------------------------- process trees

function procTable() {
  // [{pid, ppid, start}] of every process (Linux /proc; elsewhere `ps`), [] if unreadable.
  const out = []
  if (existsSync("/proc/self/stat")) {
    for (const name of readdirSync("/proc")) {
      if (!/^\d+$/.test(name)) continue
      try {
        const stat = readFileSync(`/proc/${name}/stat`, "utf8")
        const rest = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
        out.push({ pid: Number(name), ppid: Number(rest[1]), start: rest[19] })
      } catch {}
    }
    return out
  }
  try {
    const ps = spawnSync("ps", ["-A", "-o", "pid=,ppid=,lstart="], { encoding: "utf8", timeout: 2000 })
    for (const line of (ps.stdout || "").split("\n")) {
      const m = line.trim().match(/^(\d+)\s+(\d+)\s+(.*)$/)
      if (m) out.push({ pid: Number(m[1]), ppid: Number(m[2]), start: m[3] })
    }
  } catch {}
  return out
}

/** Descendants of `root` as {pid, start} (identity = pid + start time, never a pid alone). */
export function descendants(root) {
  const table = procTable()
  const kids = new Map()
  for (const p of table) {
    if (!kids.has(p.ppid)) kids.set(p.ppid, [])
    kids.get(p.ppid).push(p)
  }
  const found = []
  const todo = [root]
  const seen = new Set([root])
  while (todo.length) {
    for (const p of kids.get(todo.pop()) || []) {
      if (seen.has(p.pid)) continue
      seen.add(p.pid)
      found.push({ pid: p.pid, start: p.start })
      todo.push(p.pid)
    }
  }
  return found
}

function sameProcess(p) {
  const now = procTable().find((q) => q.pid === p.pid)
  return !!now && now.start === p.start
}

function signal(target, sig) {
  try {
    process.kill(target, sig)
    return true
  } catch {
    return false
  }
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

// ---------------------------------------------------------------- generations

// Every open manager; one `exit` listener SIGKILLs their live trees if the harness exits
// without a session_shutdown (a crash, process.exit()).
const ALL = new Set()
let exitHooked = false
function watch(gens) {
  ALL.add(gens)
  if (exitHooked) return
  exitHooked = true
  process.once("exit", () => {
    for (const g of ALL) g.killNow()
  })
}

/**
 * One session event's bridge run. `result` settles with the bridge's JSON document
 * ({kind, text, ...}) or a synthesized one: cancelled (stopped), failed (spawn error, bad
 * output, ran past budget + margin).
 */
export class Generation {
  constructor(id, source, sessionId) {
    this.id = id
    this.source = source
    this.sessionId = sessionId || ""
    this.child = null
    this.exited = false
    this.stopping = false
    this.delivered = false
    this.launched = false
    this.startedAt = Date.now()
    this.known = new Map() // pid -> {pid, start}: descendants seen while it ran
    this.result = new Promise((resolve) => (this._resolve = resolve))
    this.settled = null
  }

  settle(result) {
    if (this.settled) return
    this.settled = result
    this._resolve(result)
  }
}

/**
 * At most one live generation. `start()` makes a new one live synchronously, stops the
 * previous one (its process group TERM, then KILL) and launches only if it is still live, so
 * the middle one of rapid replacements never launches. `claim()` awaits the live generation
 * and hands its text out exactly once; a generation that is no longer live never delivers.
 */
export class Generations {
  constructor({ harness, settings, spawn = nodeSpawn, env = process.env, stopGraceMs = STOP_GRACE_MS, log = () => {} }) {
    this.harness = harness
    this.settings = settings
    this.spawn = spawn
    this.env = env
    this.stopGraceMs = stopGraceMs
    this.log = log
    this.seq = 0
    this.live = null
    this.closed = false
    this.launches = 0
    watch(this)
  }

  async start(source, { sessionId = "", cwd = "" } = {}) {
    const gen = new Generation(++this.seq, source, sessionId)
    const prev = this.live
    this.live = gen
    await (prev ? this.stop(prev) : Promise.resolve())
    if (this.live !== gen || this.closed) {
      gen.settle({ kind: "cancelled", text: "", source })
      return gen
    }
    this.launch(gen, cwd)
    return gen
  }

  launch(gen, cwd) {
    gen.launched = true
    this.launches++
    gen.startedAt = Date.now()
    const argv = bridgeArgv(this.settings, this.harness, gen.source, gen.sessionId, cwd)
    if (!this.settings.python) {
      gen.settle({ kind: "failed", text: "", error: `no interpreter configured in ${this.settings.file}` })
      return
    }
    let child
    try {
      child = this.spawn(argv[0], argv.slice(1), {
        cwd: cwd || undefined,
        detached: true, // its own process group: the whole tree can be signalled at once
        stdio: ["ignore", "pipe", "ignore"],
        env: this.env,
      })
    } catch (err) {
      gen.settle({ kind: "failed", text: "", error: `spawn failed: ${err?.message ?? err}` })
      return
    }
    gen.child = child
    const chunks = []
    let size = 0
    let overflow = false
    child.stdout?.on("data", (chunk) => {
      if (overflow) return
      size += chunk.length
      if (size > MAX_STDOUT) overflow = true
      else chunks.push(chunk)
    })
    child.on("error", (err) => {
      gen.exited = true
      gen.settle({ kind: "failed", text: "", error: `spawn failed: ${err?.message ?? err}` })
    })
    child.on("exit", () => (gen.exited = true))
    child.on("close", (code, sig) => {
      gen.exited = true
      if (gen.stopping) return gen.settle({ kind: "cancelled", text: "", source: gen.source })
      if (overflow) return gen.settle({ kind: "failed", text: "", error: "bridge output exceeded its bound" })
      const lines = Buffer.concat(chunks).toString("utf8").trim().split("\n")
      try {
        const doc = JSON.parse(lines[lines.length - 1])
        if (!doc || typeof doc.kind !== "string") throw new Error("no kind")
        gen.settle(doc)
      } catch {
        gen.settle({ kind: "failed", text: "", error: `bridge exited ${code ?? sig} without a result` })
      }
    })
  }

  /** Stop `gen`: SIGTERM its group, wait up to the grace, then SIGKILL the group and every
   *  descendant seen (pid + start time checked), and wait for the exit (bounded). */
  async stop(gen) {
    if (!gen) return
    gen.stopping = true
    gen.settle({ kind: "cancelled", text: "", source: gen.source })
    const child = gen.child
    if (!child || !child.pid) return
    const pid = child.pid
    const remember = () => {
      if (gen.exited) return
      for (const p of descendants(pid)) gen.known.set(p.pid, p)
    }
    remember()
    if (!gen.exited) signal(-pid, "SIGTERM")
    const deadline = Date.now() + this.stopGraceMs
    let polls = 0
    while (!gen.exited && Date.now() < deadline) {
      await sleep(10)
      if (++polls % 5 === 0) remember()
    }
    this.killTree(gen)
    const end = Date.now() + 1000
    while (!gen.exited && Date.now() < end) await sleep(10)
  }

  killTree(gen) {
    const pid = gen.child?.pid
    if (!pid) return
    if (!gen.exited) {
      for (const p of descendants(pid)) gen.known.set(p.pid, p)
      signal(-pid, "SIGKILL")
      signal(pid, "SIGKILL")
    }
    for (const p of gen.known.values()) {
      if (sameProcess(p)) {
        signal(-p.pid, "SIGKILL") // a descendant that made its own group (setsid) leads it
        signal(p.pid, "SIGKILL")
      }
    }
    gen.known.clear()
  }

  /** Synchronous last resort on process exit: SIGKILL the live generation's tree. */
  killNow() {
    const gen = this.live
    if (gen && gen.child && !gen.exited) {
      gen.stopping = true
      this.killTree(gen)
    }
  }

  /**
   * Await the live generation and return {text, result} once, or null: nothing live, already
   * delivered, replaced while waiting (stale), another session's, or nothing to deliver.
   * Waits at most `budget + margin`; past that the generation is stopped and fails.
   */
  async claim(sessionId = "") {
    const gen = this.live
    if (!gen || gen.delivered) return null
    const limit = this.settings.budget * 1000 + BUDGET_MARGIN_MS - (Date.now() - gen.startedAt)
    let timer
    const late = new Promise((r) => (timer = setTimeout(() => r("late"), Math.max(limit, 0))))
    const first = await Promise.race([gen.result, late])
    clearTimeout(timer)
    if (first === "late") {
      await this.stop(gen)
      gen.settled = { kind: "failed", text: "", error: "the bridge ran past its budget" }
    }
    if (this.live !== gen || gen.delivered) return null
    if (sessionId && gen.sessionId && sessionId !== gen.sessionId) return null
    gen.delivered = true
    const text = deliverable(gen.settled, nudgeOf(this.settings))
    return text ? { text, result: gen.settled, source: gen.source } : null
  }

  /** session_shutdown: no new launches; stop the live generation and its descendants. */
  async shutdown() {
    this.closed = true
    const gen = this.live
    if (gen) await this.stop(gen)
    ALL.delete(this)
  }
}

// ---------------------------------------------------------------- Pi

/**
 * Map Pi's `session_start` to a protocol source, or null (reload: no generation).
 * Pi 0.73.1 reports `startup` for `pi -c` and `pi --fork FILE` too, so a startup whose
 * session already holds conversation entries is a resume, or a fork when its header names a
 * parent session (or argv has --fork). `/new` is a context reset inside the same harness
 * process, which the protocol calls `clear` (re-emit if this process proved a complete start).
 */
export function mapPiSource(event, ctx, argv = process.argv) {
  const reason = event?.reason
  if (reason === "reload") return null
  if (reason === "new") return "clear"
  if (reason === "resume" || reason === "fork") return reason
  if (reason !== "startup") return typeof reason === "string" ? reason : "startup"
  let entries = []
  let header = null
  try {
    entries = ctx?.sessionManager?.getEntries?.() ?? []
    header = ctx?.sessionManager?.getHeader?.() ?? null
  } catch {}
  const history = entries.some((e) => e && (e.type === "message" || e.type === "custom_message" || e.type === "compaction"))
  if (!history) return "startup"
  if (header?.parentSession || argv.some((a) => a === "--fork" || a.startsWith("--fork="))) return "fork"
  return "resume"
}

function piSessionId(ctx) {
  try {
    return ctx?.sessionManager?.getSessionId?.() ?? ""
  } catch {
    return ""
  }
}

export const PI_MESSAGE_TYPE = "watchkeeper-session-start"

/**
 * Our session-start messages (custom_message entries of PI_MESSAGE_TYPE) that the model sees
 * now (session-start generations carry `details.source`; per-turn deliveries do not), as
 * Pi 0.73.1 builds its context (`buildSessionContext`): on the current branch
 * (`getBranch()`, root to leaf), and with a compaction, only those kept by the last one
 * (from its `firstKeptEntryId`) or added after it. [] when the session cannot be read.
 */
export function piContextMessages(ctx) {
  let path = []
  try {
    const sm = ctx?.sessionManager
    path = (typeof sm?.getBranch === "function" ? sm.getBranch() : sm?.getEntries?.()) ?? []
  } catch {
    return []
  }
  if (!Array.isArray(path)) return []
  let last = -1
  for (let i = path.length - 1; i >= 0; i--) {
    if (path[i]?.type === "compaction") {
      last = i
      break
    }
  }
  let visible = last < 0
  const found = []
  for (let i = 0; i < path.length; i++) {
    const entry = path[i]
    if (i === last) {
      visible = true
      continue
    }
    if (last >= 0 && i < last && entry?.id && entry.id === path[last].firstKeptEntryId) visible = true
    if (visible && entry?.type === "custom_message" && entry.customType === PI_MESSAGE_TYPE) found.push(entry)
  }
  return found
}

/** True when a digest or re-emit of ours (not only a nudge or the fallback line) is in the
 *  model's context now (piContextMessages). */
export function piDigestInContext(ctx) {
  return piContextMessages(ctx).some((e) => ["full", "reemit", "read-only"].includes(e?.details?.mode))
}

/** Run `supervise hook <harness> --event <event>` with `payload` (JSON) on its stdin and
 *  resolve to its stdout trimmed (the plain envelope: the text itself), or "" (nothing, an
 *  error, or no answer within `timeoutMs`: a turn or a read is never held up for long). The
 *  Python side keeps every "exactly once" ledger, so asking again is always safe. */
export function hookText(settings, harness, event, payload, cwd,
                         { spawn = nodeSpawn, env = process.env, timeoutMs = 5000 } = {}) {
  return new Promise((done) => {
    if (!settings.python) return done("")
    let child
    try {
      const args = ["-I", "-m", "supervisor", "hook", harness, "--event", event]
      if (settings.optIn) args.push("--opt-in")
      child = spawn(settings.python, args, { cwd: cwd || undefined, env, stdio: ["pipe", "pipe", "ignore"] })
    } catch {
      return done("")
    }
    let out = ""
    const timer = setTimeout(() => { try { child.kill("SIGKILL") } catch {} ; done("") }, timeoutMs)
    child.stdout.on("data", (chunk) => { out += chunk })
    child.on("error", () => { clearTimeout(timer); done("") })
    child.on("close", () => { clearTimeout(timer); done(out.trim()) })
    child.stdin.on("error", () => {})
    child.stdin.end(JSON.stringify(payload))
  })
}

/** Nested instructions on demand (seed 003): after a file read, ask
 *  `supervise hook <harness> --event post-tool` for the AGENTS.md of the subtree that holds
 *  it. The Python side keeps the per-session ledger (once per compaction epoch, concurrent
 *  reads inject once). Resolves to the text to append, or "". */
export function nestedForRead(settings, { path, cwd, sessionId, harness = "pi" }, options = {}) {
  if (!path) return Promise.resolve("")
  return hookText(settings, harness, "post-tool", { hook_event_name: "PostToolUse", tool_name: "Read",
    tool_input: { file_path: path }, session_id: sessionId ?? "", cwd: cwd ?? "" }, cwd, options)
}

/** The non-empty `texts` joined by one blank line (trailing newlines of all but the last
 *  trimmed), or "". */
export function joinTexts(texts) {
  const kept = texts.filter(Boolean)
  return kept.map((t, i) => (i < kept.length - 1 ? t.replace(/\n+$/, "") : t)).join("\n\n")
}

/** The per-turn work Claude, Codex and Gemini get from their per-prompt hook: deferred
 *  results that finished since the digest, and instruction files the session already has that
 *  changed during it. Asks `supervise hook <harness> --event prompt`; Python hands each item
 *  out exactly once (an atomic rename; the per-session hash baseline). Resolves to the text to
 *  deliver with this turn, or "". */
export function promptTurn(settings, { cwd, sessionId, harness }, options = {}) {
  return hookText(settings, harness, "prompt", { hook_event_name: "UserPromptSubmit",
    session_id: sessionId ?? "", cwd: cwd ?? "" }, cwd, options)
}

// ---------------------------------------------------------------- one bridge per load

const OWNERS = Symbol.for("watchkeeper.bridge.owners")

/**
 * Claim the bridge for one load of the harness's extensions: `load` is an object every
 * extension of that load shares (Pi: the API's `events` bus, one per load and `/reload`;
 * OpenCode: the plugin input's `client`, one per project instance), `owner` this copy of the
 * bridge. Two of ours in one load (the project's extension and the user's, or a package beside
 * a placed bridge; the files stay where their owner put them) would each deliver: the first
 * to load serves, the others stand down. The registry lives on `globalThis` under a
 * `Symbol.for` key, so copies of core.mjs from different folders (or versions) share it.
 * Returns true when `owner` holds the claim.
 */
export function claimLoad(load, owner) {
  if (!load || (typeof load !== "object" && typeof load !== "function")) return true
  const owners = (globalThis[OWNERS] ??= new WeakMap())
  const held = owners.get(load)
  if (held !== undefined && held !== owner) return false
  owners.set(load, owner)
  return true
}

/** Wire the Pi extension onto `pi` (the ExtensionAPI). Returns the generation manager, or
 *  null when another copy of the bridge already serves this load (:func:`claimLoad`). */
export function piExtension(pi, options = {}) {
  if (!claimLoad(pi?.events, {})) return null
  const settings = options.settings ?? loadSettings(options.dir)
  const gens = new Generations({ harness: "pi", settings, spawn: options.spawn, env: options.env, stopGraceMs: options.stopGraceMs })
  const argv = options.argv ?? process.argv
  pi.on("session_start", async (event, ctx) => {
    const source = mapPiSource(event, ctx, argv)
    if (!source) return
    // A resumed or forked session whose context already holds our digest, re-emit or nudge
    // (since its last compaction) needs nothing: no second digest, no nudge piling up.
    if ((source === "resume" || source === "fork") && piContextMessages(ctx).some((e) => e?.details?.source)) return
    await gens.start(source, { sessionId: piSessionId(ctx), cwd: ctx?.cwd ?? "" })
  })
  pi.on("session_compact", async (_event, ctx) => {
    await gens.start("compact", { sessionId: piSessionId(ctx), cwd: ctx?.cwd ?? "" })
  })
  pi.on("before_agent_start", async (_event, ctx) => {
    const sessionId = piSessionId(ctx)
    let got = await gens.claim(sessionId)
    // Pi keeps recent messages through a compaction: when our digest survived it, the
    // re-emit would be a second copy (the compact generation still ran: it re-arms nested
    // instructions on the Python side).
    if (got && got.source === "compact" && got.result.kind === "ready" && piDigestInContext(ctx)) got = null
    // every turn: finished deferred results and changed instruction files, once each
    const turn = await promptTurn(settings, { cwd: ctx?.cwd || process.cwd(), sessionId, harness: "pi" },
      { spawn: options.spawn, env: options.env })
    const text = joinTexts([got?.text, turn])
    if (!text) return
    return {
      message: {
        customType: PI_MESSAGE_TYPE,
        content: text,
        display: false,
        details: got ? { kind: got.result.kind, source: got.source, mode: got.result.mode ?? "" }
          : { kind: "turn", source: "", mode: "" },
      },
    }
  })
  pi.on("tool_result", async (event, ctx) => {
    // Pi's `read` tool ({path}); the text of a nested AGENTS.md is appended to its result.
    if (event?.toolName !== "read" || event?.isError) return
    const raw = event?.input?.path
    if (typeof raw !== "string" || !raw) return
    const cwd = ctx?.cwd || process.cwd()
    const text = await nestedForRead(settings, { path: resolvePath(cwd, raw), cwd,
      sessionId: piSessionId(ctx) }, { spawn: options.spawn, env: options.env })
    if (!text) return
    return { content: [...(Array.isArray(event.content) ? event.content : []), { type: "text", text }] }
  })
  pi.on("session_shutdown", async () => {
    await gens.shutdown()
  })
  return gens
}

// ---------------------------------------------------------------- OpenCode

/** System prompts of OpenCode 1.18.33's own internal calls (title, compaction summary,
 *  session summary): the digest is not added to them. */
export const OPENCODE_INTERNAL_PROMPTS = [
  "You are a title generator.",
  "You are a context summarization agent.",
  "Summarize what was done in this conversation.",
]

export function isInternalCall(input, system) {
  if (!input || !input.sessionID) return true // Agent.generate and other session-less calls
  const first = Array.isArray(system) && typeof system[0] === "string" ? system[0] : ""
  return OPENCODE_INTERNAL_PROMPTS.some((p) => first.startsWith(p))
}

/**
 * Add `text` to OpenCode's system prompt parts WITHOUT adding a system message: OpenCode
 * 1.18.33 sends each entry of `system` as its own `role: "system"` message, and backends that
 * accept one leading system message (vLLM with Qwen3 templates, several OpenAI-compatible
 * gateways) answer HTTP 400 to `system, system, user`. So the text joins the last string
 * entry (a blank line between); only an empty array gets a first entry. Idempotent: a text
 * already present is not added again. Mutates `system` in place.
 */
export function joinSystem(system, text) {
  if (!text || system.some((s) => typeof s === "string" && s.includes(text))) return
  for (let i = system.length - 1; i >= 0; i--) {
    if (typeof system[i] === "string") {
      system[i] = system[i] ? `${system[i].replace(/\n+$/, "")}\n\n${text}` : text
      return
    }
  }
  system.push(text)
}

/**
 * The OpenCode plugin's hooks. Per session: one generation when the session is first seen
 * in this process (its system text is not stored, so a continued session needs it again),
 * refreshed as a re-emit when the session compacts. The text rides on every model call
 * through `experimental.chat.system.transform`, joined to the existing system message once
 * per request (:func:`joinSystem`: the request keeps exactly one), never to internal
 * calls or subagent sessions; a call waits for a running generation at most until
 * `generation start + budget`. Each call also asks for the per-turn work (:func:`promptTurn`,
 * at most once per TURN_INTERVAL_MS per session): a deferred result that finished, an
 * instruction file that changed, each handed out once by Python and kept with the session's
 * text from then on (one copy per request).
 */
export function openCodeHooks(input = {}, options = {}) {
  if (!claimLoad(input?.client, {})) return {} // another copy of the bridge serves
  const settings = options.settings ?? loadSettings(options.dir)
  const cwd = input.directory || input.worktree || process.cwd()
  const sessions = new Map() // sessionID -> {gens, text}
  const children = new Set() // subagent sessions (parentID set)
  let seen = 0
  const state = (id) => {
    let st = sessions.get(id)
    if (!st) {
      st = {
        gens: new Generations({ harness: "opencode", settings, spawn: options.spawn, env: options.env, stopGraceMs: options.stopGraceMs }),
        text: null,
        compacting: false,
        extra: [], // per-turn texts (deferred results, refreshed instructions), in order
        turnAt: -Infinity,
        turning: null,
      }
      sessions.set(id, st)
      st.gens.start(seen++ === 0 ? "startup" : "new", { sessionId: id, cwd })
    }
    return st
  }
  const refresh = async (st, id) => {
    const gen = st.gens.live
    if (!gen) return st.text
    const left = gen.startedAt + settings.budget * 1000 - Date.now()
    let timer
    const late = new Promise((r) => (timer = setTimeout(() => r("late"), Math.max(left, 0))))
    const got = await Promise.race([gen.result, late])
    clearTimeout(timer)
    if (got === "late" || st.gens.live !== gen || gen.delivered) return st.text
    gen.delivered = true
    const text = deliverable(got, nudgeOf(settings))
    if (got.kind === "failed") st.text = st.text ?? text
    else if (got.kind === "ineligible") st.text = null
    else if (text) st.text = text
    return st.text
  }
  const turnEvery = options.turnIntervalMs ?? TURN_INTERVAL_MS
  // The per-turn work (deferred results, changed instruction files), asked at most once per
  // `turnEvery` ms per session (a tool loop makes many model calls per turn). OpenCode keeps
  // no system text between calls, so what a turn brought rides on every later call, once.
  const turn = (st, id) => {
    if (st.turning) return st.turning
    if (Date.now() - st.turnAt < turnEvery) return Promise.resolve()
    st.turning = promptTurn(settings, { cwd, sessionId: id, harness: "opencode" },
      { spawn: options.spawn, env: options.env }).then((text) => {
      if (text) st.extra.push(text)
      st.turnAt = Date.now()
      st.turning = null
    })
    return st.turning
  }
  const hooks = {
    event: async ({ event }) => {
      const info = event?.properties?.info
      if (event?.type === "session.created" && info?.parentID) children.add(info.id)
      if (event?.type === "session.compacted") {
        const id = event.properties?.sessionID ?? info?.id
        const st = id && sessions.get(id)
        if (st && !st.compacting) st.gens.start("compact", { sessionId: id, cwd })
        if (st) st.compacting = false
      }
    },
    "experimental.session.compacting": async (inp) => {
      const st = inp?.sessionID && sessions.get(inp.sessionID)
      if (!st) return
      st.compacting = true
      st.gens.start("compact", { sessionId: inp.sessionID, cwd })
    },
    "experimental.chat.system.transform": async (inp, output) => {
      if (!output || !Array.isArray(output.system) || isInternalCall(inp, output.system)) return
      if (children.has(inp.sessionID)) return
      const st = state(inp.sessionID)
      const text = await refresh(st, inp.sessionID)
      await turn(st, inp.sessionID)
      const all = joinTexts([text, ...st.extra])
      if (!all) return
      joinSystem(output.system, all)
    },
  }
  hooks._sessions = sessions
  hooks._shutdown = async () => {
    for (const st of sessions.values()) await st.gens.shutdown()
  }
  return hooks
}
