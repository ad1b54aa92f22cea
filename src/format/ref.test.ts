import t from 'tap'
import { parseRef, formatRef } from './ref.js'

t.test('parseRef() splits name and tag, defaulting to latest', async t => {
  t.same(parseRef('debian/python:3.11'), { name: 'debian/python', tag: '3.11' })
  t.same(parseRef('busybox'), { name: 'busybox', tag: 'latest' })
  t.equal(formatRef(parseRef('a.b/c_d:v-1')), 'a.b/c_d:v-1')
})

t.test('parseRef() names the input when it is malformed', async t => {
  t.throws(() => parseRef('Upper:1'), /invalid image name "Upper:1"/)
  t.throws(() => parseRef('a:'), /invalid tag in "a:"/)
  t.throws(() => parseRef('a:-x'), /invalid tag/)
  t.throws(() => parseRef('../x:1'), /invalid image name/)
})
