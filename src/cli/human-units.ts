/** Human-readable sizes and durations for CLI output. */

const UNITS = ['B', 'kB', 'MB', 'GB', 'TB']

/** Decimal units, as `du --si` and docker print them: 1.5 MB. */
export function formatBytes (n: number): string {
  let v = n
  let u = 0
  while (Math.abs(v) >= 1000 && u < UNITS.length - 1) { v /= 1000; u++ }
  return u === 0 ? `${v} B` : `${v.toFixed(v < 10 ? 2 : 1)} ${UNITS[u]}`
}

const SIZE_RE = /^(\d+(?:\.\d+)?)\s*([kmgt]?)(i?)b?$/i

/** Parse `512M`, `1GiB`, `10g`, `4096`: binary multiples. Returns undefined when malformed. */
export function parseSize (s: string): number | undefined {
  const m = SIZE_RE.exec(s.trim())
  if (m === null) return undefined
  const power = ' kmgt'.indexOf((m[2] ?? '').toLowerCase() || ' ')
  return Math.round(Number(m[1]) * 1024 ** power)
}
