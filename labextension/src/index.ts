import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { INotebookTracker } from '@jupyterlab/notebook';
import { runIcon } from '@jupyterlab/ui-components';

import { KernelLink } from './connection';
import { LauncherPanel } from './panel';

/**
 * Adds the notebook-launcher panel to the left sidebar.
 */
const plugin: JupyterFrontEndPlugin<void> = {
  id: 'notebook-launcher:sidebar',
  description: 'Devices, launch defaults and launches of the active notebook kernel.',
  autoStart: true,
  requires: [INotebookTracker],
  activate: (app: JupyterFrontEnd, tracker: INotebookTracker) => {
    const link = new KernelLink(tracker);
    const panel = new LauncherPanel(link);
    panel.id = 'notebook-launcher-sidebar';
    panel.title.icon = runIcon;
    panel.title.caption = 'Notebook launcher';
    app.shell.add(panel, 'left', { rank: 650 });
    link.start();
  }
};

export default plugin;
