import t from 'tap'
import { amzDate, encodeS3Path, SigV4Signer } from './sigv4.js'
import { NodeSha256 } from '../../fixtures/node-sha256.js'

// AWS's worked example "GET Object" (Signature Version 4, "Examples of signature calculations",
// Amazon S3 API reference): its credentials, request and published signature.
const EXAMPLE_CREDENTIALS = { accessKeyId: 'AKIAIOSFODNN7EXAMPLE', secretAccessKey: 'wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY' }
const EMPTY_SHA256 = 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855'

t.test('SigV4Signer.sign() reproduces the signature of AWS\'s GET Object example', async t => {
  const signer = new SigV4Signer(EXAMPLE_CREDENTIALS, 'us-east-1')
  const headers = signer.sign({
    method: 'GET',
    path: '/test.txt',
    headers: { host: 'examplebucket.s3.amazonaws.com', range: 'bytes=0-9', 'x-amz-content-sha256': EMPTY_SHA256 }
  }, new Date('2013-05-24T00:00:00Z'))
  t.equal(headers['x-amz-date'], '20130524T000000Z')
  t.equal(headers.authorization, 'AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, ' +
    'SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41')
})

t.test('SigV4Signer.sign() signs the session token and defaults to an unsigned payload', async t => {
  const at = new Date('2013-05-24T00:00:00Z')
  const plain = new SigV4Signer(EXAMPLE_CREDENTIALS, 'us-east-1').sign({ method: 'GET', path: '/b/k', headers: { host: 'h' } }, at)
  const session = new SigV4Signer({ ...EXAMPLE_CREDENTIALS, sessionToken: 'tok' }, 'us-east-1').sign({ method: 'GET', path: '/b/k', headers: { host: 'h' } }, at)
  t.equal(plain['x-amz-content-sha256'], 'UNSIGNED-PAYLOAD')
  t.equal(session['x-amz-security-token'], 'tok')
  t.match(session.authorization, /SignedHeaders=host;x-amz-content-sha256;x-amz-date;x-amz-security-token,/)
  t.not(session.authorization, plain.authorization)
  const nextDay = new SigV4Signer(EXAMPLE_CREDENTIALS, 'us-east-1').sign({ method: 'GET', path: '/b/k', headers: { host: 'h' } }, new Date('2013-05-25T00:00:00Z'))
  t.match(nextDay.authorization, /\/20130525\/us-east-1\/s3\/aws4_request/, 'the scope follows the date')
})

t.test('encodeS3Path() encodes every byte but the unreserved ones and the slashes', async t => {
  t.equal(encodeS3Path('/bucket/a b/c+d/é(1)*!\'~._-'), '/bucket/a%20b/c%2Bd/%C3%A9%281%29%2A%21%27~._-')
  t.equal(amzDate(new Date('2026-12-03T06:40:01.123Z')), '20261203T064001Z')
})

t.test('SigV4Signer.sign() agrees with the AWS SDK\'s signer on a path-style range GET with a session token', async t => {
  const { SignatureV4 } = await import('@smithy/signature-v4')
  const credentials = { ...EXAMPLE_CREDENTIALS, sessionToken: 'session/token+x' }
  const at = new Date('2026-12-03T06:50:00Z')
  const path = encodeS3Path('/bucket/prefix/blobs/ab cd+é')
  const ours = new SigV4Signer(credentials, 'eu-west-3').sign({ method: 'GET', path, headers: { host: '127.0.0.1:9000', range: 'bytes=100-4195' } }, at)
  const sdk = new SignatureV4({ credentials, region: 'eu-west-3', service: 's3', sha256: NodeSha256, uriEscapePath: false, applyChecksum: false })
  const signed = await sdk.sign({
    method: 'GET', protocol: 'http:', hostname: '127.0.0.1', port: 9000, path, query: {},
    headers: { host: '127.0.0.1:9000', range: 'bytes=100-4195', 'x-amz-content-sha256': 'UNSIGNED-PAYLOAD' }
  }, { signingDate: at })
  t.equal(ours.authorization, signed.headers.authorization)
})
