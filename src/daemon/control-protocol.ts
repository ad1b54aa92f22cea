/**
 * The control API between layerctl and layerd: newline-delimited JSON over a
 * Unix socket (`<home>/layerd.sock`, mode 0600: root only).
 *
 *   → { "id": 1, "method": "mount", "params": { … } }
 *   ← { "id": 1, "result": … }   or   { "id": 1, "error": { "code": "ERR_NOT_FOUND", "message": "…" } }
 *
 * Errors keep their LayerdError code across the socket, so the CLI prints
 * the daemon's message as if it were its own.
 */
import { join } from 'node:path'

export const SOCKET_NAME = 'layerd.sock'
export const PID_FILE_NAME = 'layerd.pid'
/** A request line longer than this is refused (a client that misbehaves). */
export const MAX_REQUEST_BYTES = 1024 * 1024

export const socketPath = (home: string): string => join(home, SOCKET_NAME)
export const pidFilePath = (home: string): string => join(home, PID_FILE_NAME)

export interface ControlRequest { id: number, method: string, params?: unknown }
export interface ControlError { code: string, message: string }
export type ControlResponse = { id: number, result: unknown } | { id: number, error: ControlError }
