import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ensureNats, freePort, type ServiceHandle } from '../../src/stack/services.ts';

// A NATS cluster of local nats-servers with JetStream (each node: its own store, client port,
// route port and monitoring port), for the cluster tests.

export interface NatsNode {
  name: string;
  port: number;
  clusterPort: number;
  monitorPort: number;
  /** nats://127.0.0.1:<port> */
  url: string;
  handle: ServiceHandle;
  /** the server's log lines */
  lines: string[];
  alive: boolean;
}

export interface NatsCluster {
  nodes: NatsNode[];
  /** every node's URL, comma-separated (NATS_URL) */
  url: string;
  node(name: string): NatsNode;
  /** SIGKILL (default) or another signal; resolves once the process is gone. */
  kill(node: NatsNode, signal?: NodeJS.Signals): Promise<void>;
  /** Starts a killed node again, on its ports and store. */
  restart(node: NatsNode): Promise<void>;
  /** The names of the client connections of a node (its /connz). */
  connectionNames(node: NatsNode): Promise<string[]>;
  /** The JetStream meta leader as a node sees it ('' while there is none). */
  metaLeader(node: NatsNode): Promise<string>;
  stop(): Promise<void>;
}

async function monitor<T>(node: NatsNode, path: string): Promise<T> {
  const res = await fetch(`http://127.0.0.1:${node.monitorPort}${path}`, { signal: AbortSignal.timeout(2000) });
  return (await res.json()) as T;
}

export async function startNatsCluster(size = 3, opts: { name?: string } = {}): Promise<NatsCluster> {
  const clusterName = opts.name ?? 'catraca';
  const root = mkdtempSync(join(tmpdir(), 'catraca-nats-cluster-'));
  const specs: Array<{ name: string; port: number; clusterPort: number; monitorPort: number }> = [];
  for (let i = 1; i <= size; i++) specs.push({ name: `n${i}`, port: await freePort(), clusterPort: await freePort(), monitorPort: await freePort() });
  const start = (s: (typeof specs)[number], lines: string[]) =>
    // ensureNats resolves once JetStream answers, i.e. once the cluster has a meta leader: the
    // nodes must start together.
    ensureNats({
      dataDir: join(root, s.name),
      port: s.port,
      args: [
        '-n',
        s.name,
        '--cluster_name',
        clusterName,
        '--cluster',
        `nats://127.0.0.1:${s.clusterPort}`,
        '--routes',
        specs
          .filter((o) => o !== s)
          .map((o) => `nats://127.0.0.1:${o.clusterPort}`)
          .join(','),
        '-m',
        String(s.monitorPort),
      ],
      onLog: (line) => lines.push(line),
    });
  const nodes: NatsNode[] = await Promise.all(
    specs.map(async (s) => {
      const lines: string[] = [];
      const handle = await start(s, lines);
      return { ...s, url: handle.url, handle, lines, alive: true };
    }),
  );
  const cluster: NatsCluster = {
    nodes,
    url: nodes.map((n) => n.url).join(','),
    node: (name) => nodes.find((n) => n.name === name)!,
    async kill(node, signal = 'SIGKILL') {
      node.alive = false;
      process.kill(node.handle.pid!, signal);
      await node.handle.stop();
    },
    async restart(node) {
      node.handle = await start(specs.find((s) => s.name === node.name)!, node.lines);
      node.alive = true;
    },
    async connectionNames(node) {
      const connz = await monitor<{ connections?: Array<{ name?: string }> }>(node, '/connz?limit=1024');
      return (connz.connections ?? []).map((c) => c.name ?? '');
    },
    async metaLeader(node) {
      const jsz = await monitor<{ meta_cluster?: { leader?: string } }>(node, '/jsz');
      return jsz.meta_cluster?.leader ?? '';
    },
    async stop() {
      await Promise.all(nodes.map((n) => n.handle.stop().catch(() => {})));
      rmSync(root, { recursive: true, force: true });
    },
  };
  // Every node agrees on one meta leader.
  const deadline = Date.now() + 20000;
  for (;;) {
    const leaders = await Promise.all(nodes.map((n) => cluster.metaLeader(n).catch(() => '')));
    if (leaders[0] && leaders.every((l) => l === leaders[0])) break;
    if (Date.now() > deadline) {
      await cluster.stop();
      throw new Error(`no JetStream meta leader within 20 s: ${JSON.stringify(leaders)}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return cluster;
}
