import { ICodeCellModel } from '@jupyterlab/cells';
import { NotebookPanel } from '@jupyterlab/notebook';
import { ServerConnection } from '@jupyterlab/services';

import { LIVE_MIME } from './live';
import { latestSnapshot } from './snapshots';

/** Where the server extension lists the launches running in a notebook (server_extension.py). */
const RUNNING_ROUTE = 'notebook-launcher/running';

interface IRunningLaunch {
  name: string; // its snapshot's name, as the output's metadata carries it
  cell: string; // the id of the cell that launched it ('' where the front end sent none)
}

/**
 * A page opened on a notebook after one of its launches began — a reload, a second tab, a page
 * that lost its connection — has no output for it where the notebook was not saved with one (the
 * kernel's output went to the page that ran the cell). Each such launch gets one in its cell: the
 * launch's latest static form, which follows the server's snapshots every second until the launch
 * ends (``LiveLaunchRenderer``), then its final form. A cell that already shows the launch (the
 * page that ran it, or a notebook saved mid-launch) is left as it is.
 */
export async function showRunningLaunches(panel: NotebookPanel): Promise<void> {
  await panel.context.ready;
  const settings = ServerConnection.makeSettings();
  const url = `${settings.baseUrl}${RUNNING_ROUTE}?notebook=${encodeURIComponent(panel.context.path)}`;
  let launches: IRunningLaunch[] = [];
  try {
    const response = await ServerConnection.makeRequest(url, {}, settings);
    launches = response.ok ? ((await response.json()) as IRunningLaunch[]) : [];
  } catch {
    return; // a server without the extension: nothing to show
  }
  for (const launch of launches) {
    const cell = findCell(panel, launch.cell);
    if (cell === null || shows(cell, launch.name)) {
      continue;
    }
    const metadata = { notebook_launcher: { snapshot: launch.name } };
    const latest = await latestSnapshot(metadata);
    if (latest === null || shows(cell, launch.name)) {
      continue;
    }
    const data: Record<string, string | Record<string, never>> = { [LIVE_MIME]: {} };
    for (const type of ['text/plain', 'text/html'] as const) {
      if (latest[type] !== undefined) {
        data[type] = latest[type];
      }
    }
    cell.outputs.add({ output_type: 'display_data', data, metadata });
  }
}

function findCell(panel: NotebookPanel, id: string): ICodeCellModel | null {
  const cells = panel.content.model?.cells;
  if (!cells || !id) {
    return null;
  }
  for (let index = 0; index < cells.length; index++) {
    const cell = cells.get(index);
    if (cell.id === id && cell.type === 'code') {
      return cell as ICodeCellModel;
    }
  }
  return null;
}

/** Whether one of the cell's outputs already shows launch ``name``. */
function shows(cell: ICodeCellModel, name: string): boolean {
  for (let index = 0; index < cell.outputs.length; index++) {
    const mark = cell.outputs.get(index).metadata?.notebook_launcher as { snapshot?: unknown } | undefined;
    if (mark?.snapshot === name) {
      return true;
    }
  }
  return false;
}
