import { IRenderMime } from '@jupyterlab/rendermime';
import { ServerConnection } from '@jupyterlab/services';

/** Where the package's server extension serves a launch's latest static form (server_extension.py). */
const SNAPSHOT_ROUTE = 'notebook-launcher/snapshots/';

/** A launch's latest static form as the server keeps it, and whether the launch has ended. */
export interface ISnapshot {
  'text/plain'?: string;
  'text/html'?: string;
  state?: string;
}

/**
 * The latest static form of the launch this output's metadata names, or null (the server has none:
 * swept, another server, no server extension).
 */
export async function latestSnapshot(metadata: IRenderMime.IMimeModel['metadata']): Promise<ISnapshot | null> {
  const mark = metadata?.notebook_launcher as { snapshot?: unknown } | undefined;
  if (typeof mark?.snapshot !== 'string') {
    return null;
  }
  const settings = ServerConnection.makeSettings();
  try {
    const url = settings.baseUrl + SNAPSHOT_ROUTE + encodeURIComponent(mark.snapshot);
    const response = await ServerConnection.makeRequest(url, {}, settings);
    return response.ok ? ((await response.json()) as ISnapshot) : null;
  } catch {
    return null;
  }
}
