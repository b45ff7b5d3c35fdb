import type { CatalogEntry } from '../catalog/catalog.ts';
import { errors } from '../errors.ts';
import { countTokens, forTarget, generateContent, geminiModelPath, geminiPath } from '../protocols/gemini/index.ts';
import { googleErrorBody, googleStatus } from '../protocols/gemini/wire.ts';
import type { ParsedRequest, Protocol } from '../protocols/types.ts';
import type { Door } from './door.ts';
import { sendJson } from './respond.ts';
import { exchangeRoute } from './routes.ts';
import type { HttpResponse, HttpRequest, TemplatedApp } from './uws.ts';

// The Gemini API's paths (src/protocols/gemini): the model is part of the path
// (`/v1beta/models/{model}:generateContent`, a catalog id's slash included), so one wildcard route
// picks the protocol per request. GET /v1beta/models and /v1beta/models/{model} list the catalog in
// Gemini's shape, open like /v1/models.

/** Paths answered in Google's error shape by the door's 404/405 (a known path with another method is a 405). */
export const GEMINI_PATHS = [{ match: /^\/v1beta\/models(\/.*)?$/, protocol: generateContent as Protocol<ParsedRequest> }];

const METHODS = ['generateContent', 'countTokens', 'streamGenerateContent'];

/** The protocol of one POST: the model and method from the path, `alt=sse` required to stream. */
function select(url: string, query: URLSearchParams): Protocol<ParsedRequest> {
  const target = geminiPath(url);
  if (!target?.model) throw errors.routeNotFound('POST', url);
  switch (target.method) {
    case 'generateContent':
      return forTarget(generateContent, { model: target.model, stream: false }) as Protocol<ParsedRequest>;
    case 'streamGenerateContent':
      if (query.get('alt') !== 'sse')
        throw errors.badRequest('streamGenerateContent is served as server-sent events only: add ?alt=sse (as @google/genai and Gemini CLI do).', 'alt');
      return forTarget(generateContent, { model: target.model, stream: true }) as Protocol<ParsedRequest>;
    case 'countTokens':
      return forTarget(countTokens, { model: target.model, stream: false }) as Protocol<ParsedRequest>;
    default:
      throw errors.routeNotFound('POST', `${url} (the Gemini methods served here: ${METHODS.join(', ')})`);
  }
}

/** A catalog chat model as Gemini's Model resource, named as the client may call it. */
function geminiModel(m: CatalogEntry, name = m.id) {
  return {
    name: `models/${name}`,
    baseModelId: m.id,
    version: m.fingerprint ?? '1',
    displayName: m.name ?? m.id,
    description: m.description ?? '',
    inputTokenLimit: m.context_length,
    outputTokenLimit: m.max_output_tokens,
    supportedGenerationMethods: METHODS,
    ...(m.reasoning ? { thinking: true } : {}),
  };
}

function modelsList(door: Door) {
  const chat = door.catalog.all().filter((m) => m.kind === 'chat');
  const byId = new Map(chat.map((m) => [m.id, m]));
  const models = chat.map((m) => geminiModel(m));
  for (const [alias, target] of door.catalog.aliases()) {
    const m = byId.get(target);
    if (m) models.push(geminiModel(m, alias));
  }
  return { models };
}

export function registerGeminiRoutes(app: TemplatedApp, door: Door): void {
  app.post('/v1beta/models/*', exchangeRoute(door, generateContent as Protocol<ParsedRequest>, 'google', select));
  app.get('/v1beta/models', (res: HttpResponse) => {
    const s = door.begin(res);
    door.track(200);
    sendJson(s, 200, modelsList(door));
  });
  app.get('/v1beta/models/*', (res: HttpResponse, req: HttpRequest) => {
    const s = door.begin(res);
    const url = req.getUrl();
    let aborted = false;
    res.onAborted(() => (aborted = s.aborted = true));
    const name = geminiModelPath(url);
    const answer = (status: number, body: unknown) => {
      if (aborted) return;
      door.track(status);
      sendJson(s, status, body);
    };
    if (name === null) {
      const e = errors.routeNotFound('GET', url);
      return answer(googleStatus(e).code, googleErrorBody(e));
    }
    door.catalog.resolve(name).then(
      (m) => {
        if (m && m.kind === 'chat') return answer(200, geminiModel(m, name));
        const e = errors.modelNotFound(name);
        answer(googleStatus(e).code, googleErrorBody(e));
      },
      () => {
        const e = errors.internal();
        answer(googleStatus(e).code, googleErrorBody(e));
      },
    );
  });
}
