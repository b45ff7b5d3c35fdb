import { vertexBaseUrl } from '../../providers/gemini/api.ts';
import { type Flags, str } from '../args.ts';
import { UsageError } from '../context.ts';

/**
 * `--vertex-project P --region R` (with --protocol gemini): the Vertex AI base URL of that project
 * and region, on Google's regional host, or on --base-url's origin when one is given (a private
 * endpoint, a test's mock). Undefined when neither flag is given.
 */
export function vertexBaseUrlFlag(flags: Flags, cmd: string, protocol: string | undefined): string | undefined {
  const project = str(flags, 'vertex-project');
  const region = str(flags, 'region');
  if (project === undefined && region === undefined) return undefined;
  if (!project || !region) throw new UsageError(`${cmd}: --vertex-project and --region go together`);
  if (protocol !== 'gemini') throw new UsageError(`${cmd}: --vertex-project and --region need --protocol gemini`);
  if (!/^[a-z][a-z0-9-]{4,28}[a-z0-9]$/.test(project)) throw new UsageError(`${cmd}: --vertex-project must be a Google Cloud project id`);
  if (!/^(?:global|[a-z]+-[a-z]+\d+)$/.test(region)) throw new UsageError(`${cmd}: --region must be a Google Cloud region like southamerica-east1`);
  const vertex = vertexBaseUrl(project, region);
  const base = str(flags, 'base-url');
  return base ? new URL(new URL(vertex).pathname, base).toString() : vertex;
}
