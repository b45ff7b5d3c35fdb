import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { type MockUpstream, type MockUpstreamOptions, startMockUpstream } from './server.ts';

// A mock Azure OpenAI resource. It checks what Azure checks before a model sees the request:
//   the api-key header, equal to the resource's key         → else 401 {"error":{"code":"401",…}}
//   the path: /openai/deployments/{deployment}/chat/completions with ?api-version=…, or the v1
//     API's /openai/v1/chat/completions with the deployment as `model`
//                                                          → an unknown path or a missing
//     api-version is 404 {"error":{"code":"404","message":"Resource not found"}}; a deployment
//     the resource does not have is 404 DeploymentNotFound
// and then answers as the OpenAI mock does for the deployment's model (its wire format, usage with
// cached and reasoning tokens, its mock-429/500/… behaviours): the request is relayed to an
// OpenAI mock of its own, with `model` set to the deployment's model.

export interface MockAzureOptions extends MockUpstreamOptions {
  apiKey: string;
  /** deployment name → the model it serves (an OpenAI mock model name: mock-gpt, mock-tools, mock-429, …) */
  deployments: Record<string, string>;
}

export interface MockAzure {
  /** the resource's endpoint, https://RES.openai.azure.com in real life */
  url: string;
  /** what the inner OpenAI mock saw (body with the deployment's model, usages) */
  openai: MockUpstream;
  /** requests Azure itself refused (key or path), and the path of the last request */
  stats: { refused: number; lastPath: string | null; lastApiKey: string | null; byDeployment: Record<string, number> };
  close(): Promise<void>;
}

const DEPLOYMENT_PATH = /^\/openai\/deployments\/([^/]+)\/chat\/completions$/;

function send(res: http.ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

export async function startMockAzure(opts: MockAzureOptions): Promise<MockAzure> {
  const openai = await startMockUpstream(opts);
  const inner = new URL(openai.url);
  const stats: MockAzure['stats'] = { refused: 0, lastPath: null, lastApiKey: null, byDeployment: {} };
  const agent = new http.Agent({ keepAlive: true });
  const server = http.createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://mock');
    stats.lastPath = url.pathname + url.search;
    const apiKey = req.headers['api-key'];
    stats.lastApiKey = typeof apiKey === 'string' ? apiKey : null;
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      if (apiKey !== opts.apiKey) {
        stats.refused++;
        return send(res, 401, {
          error: {
            code: '401',
            message:
              'Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key for an active subscription and use a correct regional API endpoint for your resource.',
          },
        });
      }
      let body: Record<string, unknown>;
      try {
        body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      } catch {
        return send(res, 400, { error: { code: 'BadRequest', message: 'Invalid JSON body.' } });
      }
      let deployment: string | undefined;
      const m = DEPLOYMENT_PATH.exec(url.pathname);
      if (req.method === 'POST' && m && url.searchParams.get('api-version')) deployment = decodeURIComponent(m[1]!);
      else if (req.method === 'POST' && url.pathname === '/openai/v1/chat/completions') deployment = typeof body.model === 'string' ? body.model : '';
      if (deployment === undefined) {
        stats.refused++;
        return send(res, 404, { error: { code: '404', message: 'Resource not found' } });
      }
      const model = opts.deployments[deployment];
      if (!model) {
        stats.refused++;
        return send(res, 404, {
          error: {
            code: 'DeploymentNotFound',
            message:
              'The API deployment for this resource does not exist. If you created the deployment within the last 5 minutes, please wait a moment and try again.',
          },
        });
      }
      stats.byDeployment[deployment] = (stats.byDeployment[deployment] ?? 0) + 1;
      const payload = Buffer.from(JSON.stringify({ ...body, model }));
      const up = http.request(
        {
          host: inner.hostname,
          port: inner.port,
          path: '/v1/chat/completions',
          method: 'POST',
          agent,
          headers: { 'content-type': 'application/json', 'content-length': payload.length, authorization: `Bearer ${opts.apiKey}` },
        },
        (upRes) => {
          res.writeHead(upRes.statusCode ?? 502, upRes.headers);
          upRes.pipe(res);
        },
      );
      up.on('error', () => res.destroy());
      res.on('close', () => up.destroy());
      up.end(payload);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, opts.host ?? '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    openai,
    stats,
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      agent.destroy();
      await openai.close();
    },
  };
}
