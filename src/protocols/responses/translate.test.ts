import { describe, expect, it } from 'vitest';
import { checkParams } from '../../chat/params.ts';
import type { CatracaError } from '../../errors.ts';
import { chatMessages, type Item, storedItems } from './items.ts';
import { parseItems, parseRequest, parseTools } from './schema.ts';
import { chatName, chatTools, customInput } from './tools.ts';
import { chatBody, clientRefusal } from './translate.ts';

// Responses requests → chat bodies, without services: what every vendor is sent for a Responses
// request, and the 400s answered before anything is held.

const located = (items: Item[]) => items.map((item, i) => ({ item, at: `input[${i}]` }));

function refusal(f: () => unknown): CatracaError {
  try {
    f();
  } catch (err) {
    return err as CatracaError;
  }
  throw new Error('expected a refusal');
}

/** The body Codex 0.169 sends (`codex exec`, abridged): developer and user messages, function, namespace and web_search tools. */
const CODEX_BODY = {
  model: 'mock/gpt',
  stream: true,
  input: [
    { type: 'message', id: 'msg_a', role: 'developer', content: [{ type: 'input_text', text: 'You are a coding agent.' }] },
    { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'say hi' }] },
  ],
  tools: [
    {
      type: 'function',
      name: 'exec_command',
      description: 'Runs a command.',
      strict: false,
      parameters: { type: 'object', properties: { cmd: { type: 'string' } } },
    },
    {
      type: 'namespace',
      name: 'multi_agent_v1',
      description: 'Sub-agents.',
      tools: [{ type: 'function', name: 'close_agent', strict: false, parameters: { type: 'object', properties: { target: { type: 'string' } } } }],
    },
    { type: 'web_search', external_web_access: false },
  ],
  tool_choice: 'auto',
  parallel_tool_calls: true,
  reasoning: { summary: 'auto' },
  store: false,
  include: ['reasoning.encrypted_content'],
  prompt_cache_key: '01a21034',
  client_metadata: { session_id: '01a21034' },
};

describe('POST /v1/responses request → chat body', () => {
  it("refuses an unknown top-level field with OpenAI's own message", () => {
    const e = refusal(() => parseRequest({ model: 'm', input: 'hi', frobnicate: 1 }));
    expect(e.status).toBe(400);
    expect(e.message).toBe('Unrecognized request argument supplied: frobnicate');
    expect(e.param).toBe('frobnicate');
  });

  it('refuses documented fields it cannot serve, naming them', () => {
    expect(refusal(() => parseRequest({ model: 'm', input: 'hi', background: true })).param).toBe('background');
    expect(refusal(() => parseRequest({ model: 'm', input: 'hi', truncation: 'auto' })).param).toBe('truncation');
    expect(parseRequest({ model: 'm', input: 'hi', truncation: 'disabled', background: false }).truncation).toBe('disabled');
  });

  it("translates Codex's request: namespace flattened, web_search left out, reasoning and store not sent", () => {
    const r = parseRequest(CODEX_BODY);
    const tools = chatTools(parseTools(r.tools), r.tool_choice);
    const { body, origins } = chatBody(r, tools, located(storedItems(parseItems(r.input), 'base', [])));
    expect(body.messages).toEqual([
      { role: 'system', content: 'You are a coding agent.' },
      { role: 'user', content: 'say hi' },
    ]);
    expect(origins).toEqual(['input[0]', 'input[1]']);
    expect(body.tools).toEqual([
      {
        type: 'function',
        function: {
          name: 'exec_command',
          description: 'Runs a command.',
          strict: false,
          parameters: { type: 'object', properties: { cmd: { type: 'string' } } },
        },
      },
      {
        type: 'function',
        function: { name: 'multi_agent_v1__close_agent', strict: false, parameters: { type: 'object', properties: { target: { type: 'string' } } } },
      },
    ]);
    expect(body).toMatchObject({ tool_choice: 'auto', parallel_tool_calls: true, prompt_cache_key: '01a21034' });
    for (const f of ['reasoning_effort', 'store', 'include', 'client_metadata', 'reasoning']) expect(body).not.toHaveProperty(f);
    expect(tools.byChatName.get('multi_agent_v1__close_agent')).toEqual({ name: 'close_agent', namespace: 'multi_agent_v1', custom: false });
    // the chat policy takes every field of it, for every vendor protocol
    for (const protocol of ['openai', 'anthropic', 'sim'] as const) {
      expect(checkParams(body, { protocol, extra_params: [], input_modalities: ['text'] })).toBeNull();
    }
  });

  it('keeps a namespaced name within 64 characters, uniquely and the same every time', () => {
    const long = chatName('a_rather_long_function_name_for_testing', 'an_equally_long_namespace_name_here');
    expect(long.length).toBe(64);
    expect(long).toBe(chatName('a_rather_long_function_name_for_testing', 'an_equally_long_namespace_name_here'));
    expect(long).not.toBe(chatName('a_rather_long_function_name_for_testing_2', 'an_equally_long_namespace_name_here'));
  });

  it('offers a custom tool as a function of one string, its grammar in the description', () => {
    const tools = chatTools(
      parseTools([
        {
          type: 'custom',
          name: 'apply_patch',
          description: 'Edit files.',
          format: { type: 'grammar', syntax: 'lark', definition: 'start: "*** Begin Patch"' },
        },
      ]),
      { type: 'custom', name: 'apply_patch' },
    );
    expect(tools.tools[0].function).toEqual({
      name: 'apply_patch',
      description: 'Edit files.\n\nThe input must follow this lark grammar:\nstart: "*** Begin Patch"',
      parameters: {
        type: 'object',
        properties: { input: { type: 'string', description: 'The raw input of the tool (free-form text).' } },
        required: ['input'],
        additionalProperties: false,
      },
    });
    expect(tools.choice).toEqual({ type: 'function', function: { name: 'apply_patch' } });
    expect(customInput('{"input":"*** Begin Patch\\n"}')).toBe('*** Begin Patch\n');
    expect(customInput('not json')).toBe('not json');
  });

  it('refuses a tool_choice that forces a hosted tool, and required with hosted tools only', () => {
    const hosted = parseTools([{ type: 'web_search' }, { type: 'function', name: 'f', parameters: {} }]);
    const e = refusal(() => chatTools(hosted, { type: 'web_search_preview' }));
    expect(e).toMatchObject({ status: 400, param: 'tool_choice', code: 'unsupported_parameter' });
    expect(e.message).toContain("'web_search_preview'");
    expect(refusal(() => chatTools(parseTools([{ type: 'file_search' }]), 'required')).message).toContain("'file_search'");
    expect(chatTools(parseTools([{ type: 'web_search' }]), 'auto')).toMatchObject({ tools: [], choice: undefined });
    expect(refusal(() => parseTools([{ type: 'teleport' }])).param).toBe('tools[0].type');
  });

  it('allowed_tools offers only the listed tools, with its mode as the choice', () => {
    const tools = parseTools([{ type: 'function', name: 'a', parameters: {} }, { type: 'function', name: 'b', parameters: {} }, { type: 'web_search' }]);
    const t = chatTools(tools, { type: 'allowed_tools', mode: 'required', tools: [{ type: 'function', name: 'b' }, { type: 'web_search' }] });
    expect(t.tools.map((x) => x.function.name)).toEqual(['b']);
    expect(t.choice).toBe('required');
  });

  it('turns text.format into response_format and reasoning.effort into reasoning_effort', () => {
    const r = parseRequest({
      model: 'm',
      input: 'hi',
      instructions: 'Be brief.',
      text: { format: { type: 'json_schema', name: 'answer', schema: { type: 'object' }, strict: true }, verbosity: 'low' },
      reasoning: { effort: 'high', summary: 'auto' },
      max_output_tokens: 50,
      temperature: 0.2,
      user: 'u-1',
    });
    const { body } = chatBody(r, chatTools([], null), located(storedItems(parseItems(r.input), 'b', [])));
    expect(body).toEqual({
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'hi' },
      ],
      response_format: { type: 'json_schema', json_schema: { name: 'answer', schema: { type: 'object' }, strict: true } },
      verbosity: 'low',
      reasoning_effort: 'high',
      temperature: 0.2,
      user: 'u-1',
    });
  });

  it('names the client field when the chat policy refuses (response_format on an Anthropic model → text.format)', () => {
    const r = parseRequest({
      model: 'm',
      input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'data:image/png;base64,AA' }] }],
      text: { format: { type: 'json_object' } },
    });
    const { body, origins } = chatBody(r, chatTools([], null), located(storedItems(parseItems(r.input), 'b', [])));
    const anthropic = checkParams(body, { protocol: 'anthropic', extra_params: [], input_modalities: ['text', 'image'] });
    expect(clientRefusal(anthropic!, origins).param).toBe('text.format');
    const { response_format: _, ...noFormat } = body;
    const textOnly = checkParams(noFormat, { protocol: 'openai', extra_params: [], input_modalities: ['text'] });
    expect(clientRefusal(textOnly!, origins)).toMatchObject({ param: 'input[0].content[0]', message: 'This model does not accept image input.' });
  });
});

describe('Responses items → chat messages', () => {
  it('puts tool outputs right after the assistant message that called them, matched by call_id', () => {
    const items = parseItems([
      { role: 'user', content: 'weather?' },
      { type: 'reasoning', id: 'rs_1', summary: [], encrypted_content: 'opaque' },
      { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'Checking.' }] },
      { type: 'function_call', call_id: 'c1', name: 'get_weather', arguments: '{"city":"SP"}' },
      { type: 'custom_tool_call', call_id: 'c2', name: 'apply_patch', input: '*** Begin Patch' },
      { type: 'custom_tool_call_output', call_id: 'c2', output: 'patched' },
      { type: 'function_call_output', call_id: 'c1', output: [{ type: 'input_text', text: '25C' }] },
      { type: 'function_call', call_id: 'c3', name: 'close_agent', namespace: 'multi_agent_v1', arguments: '{}' },
      { type: 'function_call_output', call_id: 'c3', output: 'closed' },
    ]);
    const { messages } = chatMessages(located(items));
    expect(messages).toEqual([
      { role: 'user', content: 'weather?' },
      {
        role: 'assistant',
        content: 'Checking.',
        tool_calls: [
          { id: 'c1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"SP"}' } },
          { id: 'c2', type: 'function', function: { name: 'apply_patch', arguments: '{"input":"*** Begin Patch"}' } },
        ],
      },
      { role: 'tool', tool_call_id: 'c1', content: '25C' },
      { role: 'tool', tool_call_id: 'c2', content: 'patched' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'c3', type: 'function', function: { name: 'multi_agent_v1__close_agent', arguments: '{}' } }] },
      { role: 'tool', tool_call_id: 'c3', content: 'closed' },
    ]);
  });

  it('refuses a call without output and an output without call, as OpenAI does', () => {
    const noOutput = parseItems([
      { role: 'user', content: 'x' },
      { type: 'function_call', call_id: 'c9', name: 'f', arguments: '{}' },
    ]);
    expect(refusal(() => chatMessages(located(noOutput))).message).toBe('No tool output found for function call c9.');
    const noCall = parseItems([
      { role: 'user', content: 'x' },
      { type: 'function_call_output', call_id: 'c8', output: 'y' },
    ]);
    expect(refusal(() => chatMessages(located(noCall))).message).toBe('No tool call found for function call output with call_id c8.');
  });

  it('refuses items whose tools run at OpenAI, and parts it cannot send, naming them', () => {
    expect(refusal(() => parseItems([{ type: 'web_search_call', id: 'ws_1' }])).param).toBe('input[0].type');
    const fileId = parseItems([{ role: 'user', content: [{ type: 'input_image', file_id: 'file-1' }] }]);
    expect(refusal(() => chatMessages(located(fileId))).param).toBe('input[0].content[0]');
    expect(refusal(() => parseItems([{ type: 'function_call', call_id: 'c', name: 'f' }])).param).toBe('input[0].arguments');
  });

  it('stores items with ids and text parts, and resolves item_reference against the conversation', () => {
    const prior: Item[] = [{ type: 'message', id: 'msg_prev', role: 'user', content: [{ type: 'input_text', text: 'earlier' }] }];
    const own = storedItems(
      parseItems([
        { role: 'user', content: 'now' },
        { type: 'item_reference', id: 'msg_prev' },
      ]),
      'abc',
      prior,
    );
    expect(own).toEqual([{ type: 'message', id: 'msg_abc_i0', role: 'user', content: [{ type: 'input_text', text: 'now' }] }, prior[0]]);
    const dangling = storedItems(parseItems([{ type: 'item_reference', id: 'nope' }]), 'abc', []);
    expect(refusal(() => chatMessages(located(dangling))).param).toBe('input[0].id');
  });
});
