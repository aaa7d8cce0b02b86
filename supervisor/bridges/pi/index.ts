// watchkeeper-bridge: the session-start digest for Pi (placed by `supervise install pi`;
// `supervise uninstall pi` removes it). The logic is in ./core.mjs; the interpreter it runs
// is the absolute path in ./watchkeeper.json. Protocol: docs/bridge-protocol.md.
import { piExtension } from "./core.mjs"

export default function watchkeeper(pi: any): void {
  piExtension(pi)
}
