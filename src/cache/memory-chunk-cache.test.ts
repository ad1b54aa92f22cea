import t from 'tap'
import { runChunkCacheConformance } from './chunk-cache.conformance.js'
import { MemoryChunkCache } from './memory-chunk-cache.js'

runChunkCacheConformance(t, 'MemoryChunkCache', (_t, options) => ({ cache: new MemoryChunkCache(options) }))
