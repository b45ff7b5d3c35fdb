import { Agent, type Dispatcher } from 'undici';
import { App } from '../../src/gateway/uws.ts';

// The cheapest front door JavaScript can be: uWebSockets.js in, undici out, no auth, no admission,
// no bus, no billing. FLOOR_MODE=raw hands the vendor's bytes to the client as they arrive;
// FLOOR_MODE=parse also splits the SSE events and JSON.parse + JSON.stringify each one (what any
// door that reads the vendor's chunks and writes its own must do). bench/floor.ts measures its CPU
// per request beside the mock's: the part of the stack's cost that no redesign of catraca's own
// code can remove on this runtime.

const port = Number(process.env.FLOOR_PORT);
const upstream = new URL(process.env.FLOOR_UPSTREAM!);
const mode = process.env.FLOOR_MODE === 'parse' ? 'parse' : 'raw';
const agent = new Agent({ keepAliveTimeout: 30_000, headersTimeout: 0, bodyTimeout: 0 });
const decoder = new TextDecoder();
const path = upstream.pathname.replace(/\/$/, '') + '/chat/completions';

const app = App();
app.post('/v1/chat/completions', (res, req) => {
  const authorization = req.getHeader('authorization');
  let aborted = false;
  let abortUpstream: ((err: Error) => void) | undefined;
  res.onAborted(() => {
    aborted = true;
    abortUpstream?.(new Error('client gone'));
  });
  const parts: Buffer[] = [];
  res.onData((ab, last) => {
    parts.push(Buffer.from(ab.slice(0)));
    if (!last) return;
    const body = Buffer.concat(parts);
    let buf = '';
    const handler: Dispatcher.DispatchHandlers = {
      onConnect(abort) {
        abortUpstream = abort;
      },
      onHeaders(status) {
        if (!aborted)
          res.cork(() => {
            res.writeStatus(String(status)).writeHeader('content-type', 'text/event-stream');
          });
        return true;
      },
      onData(chunk) {
        if (aborted) return true;
        if (mode === 'raw') {
          res.cork(() => res.write(chunk));
          return true;
        }
        buf += decoder.decode(chunk, { stream: true });
        let out = '';
        let i: number;
        while ((i = buf.indexOf('\n\n')) !== -1) {
          const ev = buf.slice(0, i);
          buf = buf.slice(i + 2);
          if (!ev.startsWith('data: ')) continue;
          const data = ev.slice(6);
          out += data === '[DONE]' ? 'data: [DONE]\n\n' : `data: ${JSON.stringify(JSON.parse(data))}\n\n`;
        }
        if (out) res.cork(() => res.write(out));
        return true;
      },
      onComplete() {
        if (!aborted) res.cork(() => res.end());
      },
      onError() {
        if (!aborted) res.cork(() => res.writeStatus('502').end());
      },
    };
    agent.dispatch(
      {
        origin: upstream.origin,
        path,
        method: 'POST',
        headers: { authorization, 'content-type': 'application/json', 'content-length': String(body.length) },
        body,
      },
      handler,
    );
  });
});
app.listen('127.0.0.1', port, (ok) => {
  if (!ok) {
    process.stderr.write(`floor relay: cannot listen on ${port}\n`);
    process.exit(1);
  }
  process.stderr.write(`floor relay listening on ${port} (${mode})\n`);
});
process.on('SIGTERM', () => process.exit(0));
