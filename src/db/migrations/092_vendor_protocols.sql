-- Three more vendor wire formats a model or a deployment may speak (src/providers/azure, bedrock,
-- gemini): Azure OpenAI, Amazon Bedrock's Converse API, Google's Gemini API / Vertex AI.
alter table models drop constraint models_protocol_check;
alter table models add constraint models_protocol_check check (protocol in ('sim', 'openai', 'anthropic', 'azure', 'bedrock', 'gemini'));
alter table model_deployments drop constraint model_deployments_protocol_check;
alter table model_deployments
  add constraint model_deployments_protocol_check check (protocol in ('sim', 'openai', 'anthropic', 'azure', 'bedrock', 'gemini'));
