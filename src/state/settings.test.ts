import t from 'tap'
import { resolveSettings } from './settings.js'

t.test('resolveSettings() starts layerd under a holder unless LAYERD_HOLDER=0', async t => {
  t.equal(resolveSettings({ home: '/h' }, {}).holder, true, 'a holder by default')
  t.equal(resolveSettings({ home: '/h' }, { LAYERD_HOLDER: '1' }).holder, true, 'any other value keeps it')
  t.equal(resolveSettings({ home: '/h' }, { LAYERD_HOLDER: '0' }).holder, false, 'LAYERD_HOLDER=0: layerd alone')
})
