// watchkeeper-bridge: the session-start digest for OpenCode (placed by
// `supervise install opencode`; `supervise uninstall opencode` removes it). The logic is in
// ./watchkeeper/core.mjs; the interpreter it runs is the absolute path in
// ./watchkeeper/watchkeeper.json. Protocol: docs/bridge-protocol.md.
import { openCodeHooks } from "./watchkeeper/core.mjs"

export const WatchkeeperPlugin = async (input: any) => openCodeHooks(input)
