import t from 'tap'
import { BadInputError } from '../errors.js'
import { assertValidKey, assertValidPrefix, objectKeyProblem } from './object-key.js'

t.test('objectKeyProblem() accepts the store layout and unusual but legal names', async t => {
  for (const key of ['blobs/0123abcd', 'refs/docker.io%2Flibrary%2Fpython/3.11', 'a', 'a/b/c', 'x:y', 'ünï/日本', '..a', 'a..', '.hidden', 'x'.repeat(255)]) {
    t.equal(objectKeyProblem(key), undefined, key)
  }
})

t.test('objectKeyProblem() names what is wrong with a key', async t => {
  t.equal(objectKeyProblem(''), 'key is empty')
  t.match(objectKeyProblem('/abs'), /empty path component/)
  t.match(objectKeyProblem('a//b'), /empty path component/)
  t.match(objectKeyProblem('a/'), /empty path component/)
  t.match(objectKeyProblem('a/../b'), /"\.\." is not allowed/)
  t.match(objectKeyProblem('./b'), /"\." is not allowed/)
  t.match(objectKeyProblem('a\u0000b'), /control characters/)
  t.match(objectKeyProblem('blobs/.tmp-123'), /reserved/)
  t.match(objectKeyProblem('x'.repeat(256)), /longer than 255 bytes/)
  t.match(objectKeyProblem(('x'.repeat(200) + '/').repeat(6)), /longer than 1024 bytes/)
})

t.test('assertValidKey() and assertValidPrefix() throw BadInputError naming the input and the store', async t => {
  t.throws(() => assertValidKey('../etc/passwd', 'file:///s'), BadInputError)
  t.throws(() => assertValidKey('../etc/passwd', 'file:///s'), { message: 'invalid object key "../etc/passwd" for store file:///s: path component ".." is not allowed' })
  for (const prefix of ['', 'a', 'a/', 'a/b', 'blobs/.tm', '..']) t.doesNotThrow(() => assertValidPrefix(prefix, 'file:///s'), JSON.stringify(prefix))
  for (const prefix of ['../', 'a/../', '/a', 'a//', 'a\u0000']) t.throws(() => assertValidPrefix(prefix, 'file:///s'), BadInputError, JSON.stringify(prefix))
})
