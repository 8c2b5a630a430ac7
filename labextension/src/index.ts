import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { INotebookTracker } from '@jupyterlab/notebook';
import { runIcon } from '@jupyterlab/ui-components';

import { KernelLink } from './connection';
import { LauncherPanel } from './panel';
import { SavedLaunchExtension } from './saved';
import { TabTies } from './tabs';

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

/**
 * Shows launch outputs of notebooks saved mid-launch: the live widget while it lives, else the
 * static form (never "Error displaying widget").
 */
const savedLaunches: JupyterFrontEndPlugin<void> = {
  id: 'notebook-launcher:saved-launches',
  description: 'Launch outputs saved while the launch ran: the live widget while it lives, else the static form.',
  autoStart: true,
  activate: (app: JupyterFrontEnd) => {
    app.docRegistry.addWidgetExtension('Notebook', new SavedLaunchExtension());
  }
};

/**
 * Ties each launch widget's tabs to their panes (`aria-controls`, `role="tabpanel"`): ipywidgets'
 * Tab leaves them apart, so screen readers cannot go from a tab to the log it shows.
 */
const tabTies: JupyterFrontEndPlugin<void> = {
  id: 'notebook-launcher:tab-ties',
  description: "Ties the launch widget's tabs to their panes for assistive technology.",
  autoStart: true,
  activate: () => {
    new TabTies(document.body).start();
  }
};

export default [plugin, savedLaunches, tabTies];
