// watchkeeper-bridge (package): the session-start digest for OpenCode, named in opencode.json
// ("plugin": ["opencode-watchkeeper"] or a local folder). It carries no copy of the bridge:
// `supervise-hook --where` (on PATH beside `supervise`: pipx, uv tool) names the interpreter
// and the installed package, whose bridges/core.mjs it loads. Protocol: docs/bridge-protocol.md.
// It asks with --opt-in at either scope: it serves only projects that opted in, and a
// project-scope install of it is that project's opt-in (supervisor/session/_gates.py).
import { execFileSync } from "node:child_process"
import { join } from "node:path"
import { pathToFileURL } from "node:url"

export const WatchkeeperPlugin = async (input: any) => {
  let where: string[]
  try {
    where = execFileSync("supervise-hook", ["--where"], { encoding: "utf8", timeout: 30000,
      stdio: ["ignore", "pipe", "pipe"] }).trim().split("\n")
  } catch {
    console.error("watchkeeper: supervise-hook is not on PATH (install watchkeeper with pipx or uv tool); no digest")
    return {}
  }
  const [python, pkg] = where
  const core = await import(pathToFileURL(join(pkg, "bridges", "core.mjs")).href)
  const settings = core.loadSettings(join(pkg, "bridges"))
  return core.openCodeHooks(input, { settings: { ...settings, python, optIn: true, file: "supervise-hook --where" } })
}
