/**
 * containerd's gRPC API, loaded at run time from the protos Debian's
 * `golang-github-containerd-containerd-dev` installs (its Go source tree
 * under /usr/share/gocode). Nothing of containerd's is copied into the
 * repository: the .proto files are read where the package put them, and
 * their gogoproto imports resolve against `golang-github-gogo-protobuf-dev`
 * (a dependency of that package). google/protobuf types come with
 * protobufjs.
 *
 * `LAYERD_CONTAINERD_API` overrides the directory that holds `github.com/…`
 * (for a containerd source checkout elsewhere).
 *
 * May import: src/errors.ts, @grpc/grpc-js, @grpc/proto-loader, this folder.
 */
import { join } from 'node:path'
import * as grpc from '@grpc/grpc-js'
import * as protoLoader from '@grpc/proto-loader'
import { UnsupportedError } from '../errors.js'
import { CONTAINERD_PROTOS, containerdApiRoot } from './containerd-api-root.js'

export { CONTAINERD_PROTOS, containerdApiRoot } from './containerd-api-root.js'

export type ContainerdService = keyof typeof CONTAINERD_PROTOS

/** What a loaded service offers: its definition (for a server) and a client constructor. */
export interface LoadedService {
  definition: grpc.ServiceDefinition
  Client: grpc.ServiceClientConstructor
}

const SERVICE_PATHS: Record<ContainerdService, string> = {
  snapshots: 'containerd.services.snapshots.v1.Snapshots',
  content: 'containerd.services.content.v1.Content',
  images: 'containerd.services.images.v1.Images',
  leases: 'containerd.services.leases.v1.Leases'
}

/** Plain JS values for the wire: field names as in the .proto, int64 as number, enums as names. */
const LOADER_OPTIONS: protoLoader.Options = { keepCase: true, longs: Number, enums: String, defaults: true, oneofs: true }

const loaded = new Map<ContainerdService, LoadedService>()


let packages: any

/**
 * One containerd service. The first call parses every file of
 * CONTAINERD_PROTOS in one pass (they share their imports: one parse is
 * about a third of four). Sync; throws UnsupportedError when the protos are
 * missing.
 */
export function containerdService (name: ContainerdService): LoadedService {
  let service = loaded.get(name)
  if (service === undefined) {
    if (packages === undefined) {
      const root = containerdApiRoot()
      const definition = protoLoader.loadSync(Object.values(CONTAINERD_PROTOS).map(f => join(root, f)), {
        ...LOADER_OPTIONS,
        includeDirs: [root, join(root, 'github.com/gogo/protobuf')]
      })
      packages = grpc.loadPackageDefinition(definition)
    }
    let node: any = packages
    for (const part of SERVICE_PATHS[name].split('.')) node = node?.[part]
    if (typeof node !== 'function') throw new UnsupportedError(`${CONTAINERD_PROTOS[name]} does not define ${SERVICE_PATHS[name]}`)
    service = { definition: (node as grpc.ServiceClientConstructor).service, Client: node as grpc.ServiceClientConstructor }
    loaded.set(name, service)
  }
  return service
}
