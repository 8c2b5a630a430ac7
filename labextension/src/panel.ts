import { ISessionContext } from '@jupyterlab/apputils';
import { INotebookTracker } from '@jupyterlab/notebook';
import { Kernel } from '@jupyterlab/services';
import { Widget } from '@lumino/widgets';

import {
  COMM_TARGET,
  IInventory,
  ILaunchInfo,
  ISetSettingsMsg,
  ISettings,
  IStateMsg,
  KernelMsg
} from './messages';

/**
 * The sidebar: the active notebook kernel's devices, the launch defaults it uses when
 * `num_processes` (etc.) is not given, and its launches. It follows notebook switches and
 * kernel restarts. It sends only settings; Stop interrupts the kernel.
 */
export class LauncherPanel extends Widget {
  constructor(tracker: INotebookTracker) {
    super();
    this.addClass('nl-sidebar');
    this._tracker = tracker;
    tracker.currentChanged.connect(this._follow, this);
    this._follow();
  }

  private _follow(): void {
    if (this._session) {
      this._session.kernelChanged.disconnect(this._connect, this);
      this._session.statusChanged.disconnect(this._onStatus, this);
    }
    const notebook = this._tracker.currentWidget;
    this._session = notebook ? notebook.sessionContext : null;
    if (!this._session) {
      this._close();
      this._message('Open a notebook to see its kernel’s devices and launches.');
      return;
    }
    this._session.kernelChanged.connect(this._connect, this);
    this._session.statusChanged.connect(this._onStatus, this);
    void this._session.ready.then(() => this._connect());
  }

  private _onStatus(_: ISessionContext, status: Kernel.Status): void {
    if (status === 'restarting' || status === 'autorestarting') {
      this._restarting = true;
      this._close();
      this._message('The kernel is restarting…');
    } else if (status === 'idle' && this._restarting) {
      this._restarting = false;
      this._connect();
    }
  }

  private _close(): void {
    const comm = this._comm;
    this._comm = null;
    this._state = null;
    if (comm && !comm.isDisposed) {
      try {
        comm.close();
      } catch {
        // the kernel is gone already
      }
    }
  }

  private _connect(): void {
    this._close();
    const kernel = this._session?.session?.kernel;
    if (!kernel) {
      this._message('This notebook has no kernel.');
      return;
    }
    const comm = kernel.createComm(COMM_TARGET);
    comm.onMsg = msg => {
      if (this._comm === comm) {
        this._onMessage(msg.content.data as unknown as KernelMsg);
      }
    };
    comm.onClose = () => {
      if (this._comm === comm) {
        this._comm = null;
        this._notLoaded(kernel);
      }
    };
    this._comm = comm;
    this._message('Connecting to the kernel…');
    comm.open({ type: 'get_state' });
  }

  private _onMessage(msg: KernelMsg): void {
    if (msg.type === 'state') {
      this._state = msg;
      this._error = '';
    } else if (msg.type === 'reply' && this._state) {
      this._state.settings = msg.settings;
      this._error = msg.ok ? '' : msg.error || 'the kernel refused the setting';
    } else if (msg.type === 'launch' && this._state) {
      const others = this._state.launches.filter(l => l.id !== msg.launch.id);
      this._state.launches = [...others, msg.launch].slice(-20);
    }
    this._render();
  }

  private _send(settings: Partial<ISettings>): void {
    if (!this._comm) {
      return;
    }
    const msg: ISetSettingsMsg = {
      type: 'set_settings',
      request_id: `r${++this._requests}`,
      settings
    };
    this._comm.send(msg as any);
  }

  private _message(text: string): void {
    this.node.replaceChildren(el('div', 'nl-message', text));
  }

  private _notLoaded(kernel: Kernel.IKernelConnection): void {
    const button = el('button', 'jp-mod-styled jp-mod-accept nl-load', 'Load notebook_launcher');
    button.onclick = () => {
      button.disabled = true;
      const future = kernel.requestExecute({
        code: '%load_ext notebook_launcher',
        silent: true,
        store_history: false
      });
      void future.done.then(() => this._connect());
    };
    this.node.replaceChildren(
      el('h3', 'nl-title', 'Notebook launcher'),
      el('div', 'nl-message', 'notebook_launcher is not loaded in this kernel.'),
      button
    );
  }

  private _render(): void {
    const state = this._state;
    if (!state) {
      return;
    }
    this.node.replaceChildren(
      el('h3', 'nl-title', 'Notebook launcher'),
      this._devices(state.inventory),
      this._settings(state),
      el('div', 'nl-error', this._error),
      this._launches(state.launches)
    );
  }

  private _devices(inventory: IInventory): HTMLElement {
    const list = el('ul', 'nl-devices');
    for (const gpu of inventory.cuda) {
      const memory = gpu.memory_mib ? ` · ${(gpu.memory_mib / 1024).toFixed(0)} GiB` : '';
      list.appendChild(el('li', 'nl-device', `GPU ${gpu.index}: ${gpu.name}${memory}`));
    }
    if (inventory.tpu.cores > 0) {
      const kind = inventory.tpu.type ? ` (${inventory.tpu.type})` : '';
      list.appendChild(el('li', 'nl-device', `TPU: ${inventory.tpu.cores} cores${kind}`));
    }
    list.appendChild(el('li', 'nl-device', `CPU: ${inventory.cpu.count} cores`));
    const section = el('section', 'nl-section');
    section.append(el('h4', '', `Devices (launches use ${inventory.device.toUpperCase()})`), list);
    return section;
  }

  private _settings(state: IStateMsg): HTMLElement {
    const { inventory, settings, choices } = state;
    const counts: [string, string][] = [['', `default (${inventory.default_processes})`]];
    for (let n = 1; n <= inventory.max_processes; n++) {
      counts.push([String(n), String(n)]);
    }
    const current = settings.num_processes === null ? '' : String(settings.num_processes);
    const section = el('section', 'nl-section');
    section.append(
      el('h4', '', 'Defaults for launches in this kernel'),
      field('Processes', 'nl-num-processes', counts, current, value =>
        this._send({ num_processes: value === '' ? null : Number(value) })
      ),
      field(
        'Start method',
        'nl-start-method',
        choices.start_method.map(c => [c, c]),
        settings.start_method,
        value => this._send({ start_method: value })
      ),
      field(
        'Mixed precision',
        'nl-mixed-precision',
        choices.mixed_precision.map(c => [c, c]),
        settings.mixed_precision,
        value => this._send({ mixed_precision: value })
      )
    );
    return section;
  }

  private _launches(launches: ILaunchInfo[]): HTMLElement {
    const section = el('section', 'nl-section');
    section.appendChild(el('h4', '', 'Launches'));
    if (launches.length === 0) {
      section.appendChild(el('div', 'nl-message', 'No launches yet.'));
    }
    for (const launch of [...launches].reverse()) {
      const row = el('div', `nl-launch nl-launch-${launch.status}`);
      row.dataset.launchId = launch.id;
      row.appendChild(
        el(
          'div',
          'nl-launch-line',
          `${launch.id} · ${launch.ranks.length} ranks · ${launch.device} · ${launch.start_method} · ` +
            `${launch.status} · ${launch.elapsed.toFixed(1)} s`
        )
      );
      const chips = el('div', 'nl-launch-chips');
      for (const rank of launch.ranks) {
        const status = launch.rank_status[String(rank)];
        chips.appendChild(el('span', `nl-rank nl-rank-${status}`, `${rank}: ${status}`));
      }
      row.appendChild(chips);
      if (launch.status === 'running' || launch.status === 'starting') {
        const stop = el('button', 'jp-mod-styled jp-mod-warn nl-stop', 'Stop');
        stop.title = 'Interrupt the kernel: every rank of the running launch is ended';
        stop.onclick = () => void this._session?.session?.kernel?.interrupt();
        row.appendChild(stop);
      }
      section.appendChild(row);
    }
    return section;
  }

  private _tracker: INotebookTracker;
  private _session: ISessionContext | null = null;
  private _comm: Kernel.IComm | null = null;
  private _state: IStateMsg | null = null;
  private _error = '';
  private _requests = 0;
  private _restarting = false;
}

function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  className: string,
  text?: string
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  if (className) {
    node.className = className;
  }
  if (text !== undefined) {
    node.textContent = text;
  }
  return node;
}

function field(
  label: string,
  testId: string,
  options: [string, string][],
  value: string,
  onChange: (value: string) => void
): HTMLElement {
  const select = el('select', 'jp-mod-styled nl-select');
  select.dataset.testid = testId;
  for (const [optionValue, text] of options) {
    const option = el('option', '', text);
    option.value = optionValue;
    select.appendChild(option);
  }
  select.value = value;
  select.onchange = () => onChange(select.value);
  const row = el('label', 'nl-field');
  row.append(el('span', 'nl-label', label), select);
  return row;
}
