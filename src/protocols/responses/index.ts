import { inputTokensUpperBound } from '../../billing/estimate.ts';
import { checkParams } from '../../chat/params.ts';
import { CatracaError, errors } from '../../errors.ts';
import { createLogger } from '../../log.ts';
import { nulPath } from '../stored-text.ts';
import type { ParsedRequest, PrepareContext, Protocol } from '../types.ts';
import { type OnFinal, ResponsesEncoder } from './encoder.ts';
import { idBase } from './ids.ts';
import { type Item, storedItems } from './items.ts';
import { type Echo, echoOf } from './response.ts';
import { parseItems, parseRequest, parseTools, type ResponsesRequest } from './schema.ts';
import { loadResponse, responseSaver } from './store.ts';
import { type ChatTools, chatTools } from './tools.ts';
import { type ChatBody, chatBody, clientRefusal } from './translate.ts';

// POST /v1/responses: OpenAI's Responses API, translated to chat completions for every vendor.
// `parse` checks the body (400s before any database read); `prepare` loads the conversation
// `previous_response_id` continues (the caller's tenant only) and builds the chat body, which the
// chat policy checks and the hold bounds like any chat request; the encoder writes Responses
// events and, with `store` on, saves the response before its end is written.

const log = createLogger('gateway');

/** How long the end of a response waits for its row; past it the answer goes out and the write goes on. */
const STORE_WAIT_MS = 2000;

export interface ResponsesParsed extends ParsedRequest {
  r: ResponsesRequest;
  items: Item[];
  tools: ChatTools;
  echo: Echo;
  /** set by prepare: the chat body, and the conversation as it is stored */
  chat?: ChatBody;
  conversation?: Item[];
  /** set by prepare when the response is to be stored */
  onFinal?: OnFinal;
}

function chatOf(req: ResponsesParsed): ChatBody {
  if (!req.chat) throw new Error('responses: prepare() did not run');
  return req.chat;
}

/** The conversation `previous_response_id` names, or a 400/404 (another tenant's is a 404 like a missing one). */
async function previousItems(req: ResponsesParsed, ctx: PrepareContext): Promise<Item[]> {
  const id = req.r.previous_response_id;
  if (!id) return [];
  if (ctx.config.RESPONSES_RETENTION_DAYS === 0) {
    throw errors.badRequest(
      'previous_response_id cannot be used: this gateway does not store responses (RESPONSES_RETENTION_DAYS=0). Send the whole conversation as input.',
      'previous_response_id',
    );
  }
  const prev = await loadResponse(ctx.db, ctx.key.tenant_id, id);
  if (!prev)
    throw new CatracaError(404, 'not_found_error', 'previous_response_not_found', `Previous response with id '${id}' not found.`, 'previous_response_id');
  return [...prev.input_items, ...prev.output_items];
}

/** Saves the finished response; a failure (or a slow database) never fails the response itself. */
function storer(req: ResponsesParsed, ctx: PrepareContext, input: Item[]): OnFinal {
  return (response) => {
    const saved = responseSaver(ctx.db)
      .save({
        tenantId: ctx.key.tenant_id,
        keyId: ctx.key.id,
        requestId: ctx.requestId,
        input,
        response,
        params: req.echo,
        retentionDays: ctx.config.RESPONSES_RETENTION_DAYS,
      })
      .catch((err) => log.warn('response not stored', { request_id: ctx.requestId, err: err as Error }));
    return Promise.race([saved, new Promise<void>((resolve) => setTimeout(resolve, STORE_WAIT_MS).unref())]);
  };
}

export const responses: Protocol<ResponsesParsed> = {
  name: 'responses',
  path: '/v1/responses',
  kind: 'chat',
  parse(json) {
    const r = parseRequest(json);
    const { model, ...rest } = r;
    const tools = parseTools(r.tools);
    return {
      model,
      stream: r.stream === true,
      body: rest,
      endUser: r.user ?? undefined,
      r,
      items: parseItems(r.input),
      tools: chatTools(tools, r.tool_choice),
      echo: echoOf(r, tools),
    };
  },
  async prepare(req, ctx) {
    const storing = req.echo.store && ctx.config.RESPONSES_RETENTION_DAYS > 0;
    // a stored response's strings go to jsonb, which cannot hold U+0000: refused, naming the field
    // (with store: false the request is only relayed, and may hold anything JSON can)
    const nul = storing ? nulPath(req.r, '') : null;
    if (nul) throw errors.badRequest(`Invalid value for '${nul}': U+0000 cannot be stored (PostgreSQL jsonb refuses it); remove it or send store: false.`, nul);
    const prior = await previousItems(req, ctx);
    const own = storedItems(req.items, idBase(ctx.requestId), prior);
    const conversation = [...prior.map((item) => ({ item, at: 'previous_response_id' })), ...own.map((item, i) => ({ item, at: `input[${i}]` }))];
    req.chat = chatBody(req.r, req.tools, conversation);
    req.conversation = [...prior, ...own];
    if (storing) req.onFinal = storer(req, ctx, req.conversation);
  },
  check(req, model) {
    const chat = chatOf(req);
    const refused = checkParams(chat.body, model);
    return refused && clientRefusal(refused, chat.origins);
  },
  inputBound: (req, model) => inputTokensUpperBound(chatOf(req).body, model),
  outputCap: (req) => ({ requested: req.r.max_output_tokens ?? null, param: 'max_output_tokens', clamp: false }),
  job: (req, model) => ({ api: 'chat', body: { ...chatOf(req).body, max_completion_tokens: req.r.max_output_tokens ?? model.max_output_tokens } }),
  encoder: (ctx, req) => new ResponsesEncoder(ctx, req.echo, req.tools.byChatName, req.onFinal),
  errorBody: (e) => ({ body: e.toJSON() }),
};
