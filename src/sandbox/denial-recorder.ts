/**
 * The sink every sandbox made through the library API records its denials
 * in: the node database (src/state/denial-table.ts), where `layerctl events`
 * and layerd's metrics read them from any process. A write that fails
 * (database busy past its timeout, disk full) loses that record only and is
 * counted as dropped: the sandbox's call was refused all the same.
 *
 * May import: src/runtime/, src/state/.
 */
import type { DenialSink } from '../runtime/seccomp/denial-event.js'
import { DenialTable } from '../state/denial-table.js'
import type { NodeDb } from '../state/node-db.js'

export function denialRecorder (db: NodeDb): DenialSink {
  const table = new DenialTable(db)
  return {
    record: e => {
      try { table.add(e) } catch { try { table.addDropped(e.tier, 1) } catch {} }
    },
    dropped: (who, n) => {
      try { table.addDropped(who.tier, n) } catch {}
    }
  }
}
