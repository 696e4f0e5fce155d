// Preload for Node 20 (node --import ./globsync.mjs): @modelcontextprotocol/conformance
// 0.1.16 imports fs.globSync, which Node 22 added. A resolve hook hands every
// importer of "fs" a module that re-exports node:fs and adds globSync; the
// package itself is not changed.
import { register } from 'node:module';
import fs from 'node:fs';

if (typeof fs.globSync !== 'function') {
  register(new URL('./globsync-hooks.mjs', import.meta.url));
}
