// image-mount.test.ts again, served by the fuse-native backend (libfuse 2)
// instead of the kernel-protocol server: both backends pass the same suite.
process.env.LAYERD_FUSE_BACKEND = 'fuse-native'
await import('./image-mount.test.js')
