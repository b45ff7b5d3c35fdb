import { expect, test } from 'vitest';
import { AZURE_API_VERSION, chatCompletionsUrl, isV1, requestHeaders } from './api.ts';

test('the deployment path with the base URL’s api-version, or the default one; the v1 API as is', () => {
  expect(chatCompletionsUrl('https://res.openai.azure.com?api-version=2025-04-01-preview', 'gpt4o').toString()).toBe(
    'https://res.openai.azure.com/openai/deployments/gpt4o/chat/completions?api-version=2025-04-01-preview',
  );
  expect(chatCompletionsUrl('https://res.openai.azure.com/openai/', 'my dep').toString()).toBe(
    `https://res.openai.azure.com/openai/deployments/my%20dep/chat/completions?api-version=${AZURE_API_VERSION}`,
  );
  expect(chatCompletionsUrl('https://res.openai.azure.com/openai/v1', 'gpt4o').toString()).toBe('https://res.openai.azure.com/openai/v1/chat/completions');
  expect([isV1('https://res.openai.azure.com/openai/v1/'), isV1('https://res.openai.azure.com/openai')]).toEqual([true, false]);
  expect(requestHeaders('k', 10)).toMatchObject({ 'api-key': 'k', 'content-length': '10' });
  expect(requestHeaders('k', 10)).not.toHaveProperty('authorization');
});
