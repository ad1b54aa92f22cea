/**
 * The subset of containerd's filter syntax (containerd/filters) that
 * snapshot walks use: `field==value` and `field!=value` joined by `,`
 * (and), with fields `name`, `parent`, `kind` and `labels.KEY` (KEY
 * optionally double-quoted), values optionally double-quoted; a bare
 * `field` means "present". Several filters are or-ed. A filter this subset
 * cannot read matches everything: containerd re-checks what a walk returns
 * (its metadata store does for the remote-snapshot lookup), so a wider
 * answer is safe and a narrower one would lose snapshots.
 *
 * Pure.
 */

export interface FilterableInfo { name: string, parent: string, kind: string, labels: Record<string, string> }

type Clause = { field: string, op: '==' | '!=' | 'present', value: string }

const CLAUSE = /^\s*((?:labels\.(?:"(?:[^"\\]|\\.)*"|[A-Za-z0-9_./-]+))|name|parent|kind)\s*(?:(==|!=)\s*("(?:[^"\\]|\\.)*"|[^,]*))?\s*$/

function unquote (s: string): string {
  return s.startsWith('"') ? JSON.parse(s) as string : s.trim()
}

function parseFilter (filter: string): Clause[] | undefined {
  const clauses: Clause[] = []
  // Split on commas outside quotes.
  const parts = filter.match(/(?:[^,"]|"(?:[^"\\]|\\.)*")+/g) ?? []
  for (const part of parts) {
    const m = CLAUSE.exec(part)
    if (m === null) return undefined
    let field = m[1]!
    if (field.startsWith('labels.')) field = `labels.${unquote(field.slice('labels.'.length))}`
    clauses.push(m[2] === undefined ? { field, op: 'present', value: '' } : { field, op: m[2] as '==' | '!=', value: unquote(m[3] ?? '') })
  }
  return clauses
}

function fieldOf (info: FilterableInfo, field: string): string | undefined {
  if (field.startsWith('labels.')) return info.labels[field.slice('labels.'.length)]
  if (field === 'kind') return info.kind.toLowerCase()
  return field === 'name' ? info.name : info.parent
}

/** A predicate for `filters` (or-ed; none: everything). Pure. */
export function snapshotFilter (filters: readonly string[]): (info: FilterableInfo) => boolean {
  const parsed = filters.filter(f => f.trim() !== '').map(parseFilter)
  if (parsed.length === 0 || parsed.some(p => p === undefined)) return () => true
  return info => parsed.some(clauses => clauses!.every(c => {
    const v = fieldOf(info, c.field)
    const want = c.field === 'kind' ? c.value.toLowerCase() : c.value
    if (c.op === 'present') return v !== undefined && v !== ''
    return c.op === '==' ? v === want : v !== want
  }))
}
