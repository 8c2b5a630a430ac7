import { ICodeCellModel } from '@jupyterlab/cells';
import { Widget } from '@lumino/widgets';

import { Connection, KernelLink } from './connection';
import { IInventory, ILaunchInfo, ISettings, IStateMsg, IStatusSection } from './messages';

/**
 * The sidebar: the active notebook kernel's devices, the launch defaults it uses when
 * `num_processes` (etc.) is not given, and its launches. It only renders what `KernelLink` holds.
 *
 * Each backend's sections (the start server, a Ray cluster, a package's own) are drawn from one
 * schema (`IStatusSection`), so a new backend needs no change here.
 *
 * Updates are keyed: the device list is rebuilt only when the devices change, a dropdown's
 * options only when its choices change (and its value is not touched while it is open), and each
 * launch row is updated in place, so a stream of launch updates never closes an open dropdown.
 * Elapsed times of running launches tick locally between updates.
 */
export class LauncherPanel extends Widget {
  constructor(link: KernelLink) {
    super();
    this.addClass('nl-sidebar');
    this._link = link;
    this._message = el('div', 'nl-message');
    this._loadButton = el('button', 'jp-mod-styled jp-mod-accept nl-load', 'Load notebook_launcher');
    this._loadButton.onclick = () => {
      this._loadButton.disabled = true;
      link.load();
    };
    this._ready = el('div', 'nl-ready');
    this._devices = el('ul', 'nl-devices');
    this._deviceTitle = el('h4', '');
    this._sections = el('div', 'nl-backend-sections');
    this._selects = {
      num_processes: select('nl-num-processes', value =>
        link.setSettings({ num_processes: value === '' ? null : Number(value) })
      ),
      start_method: select('nl-start-method', value => link.setSettings({ start_method: value })),
      mixed_precision: select('nl-mixed-precision', value => link.setSettings({ mixed_precision: value }))
    };
    this._error = el('div', 'nl-error');
    this._launchList = el('div', 'nl-launch-list');
    this._noLaunches = el('div', 'nl-message', 'No launches yet.');
    this._build();
    link.changed.connect((_, connection) => this._render(connection), this);
    this._render(link.connection);
    this._ticker = window.setInterval(() => this._tick(), 500);
  }

  dispose(): void {
    window.clearInterval(this._ticker);
    super.dispose();
  }

  private _build(): void {
    const devices = el('section', 'nl-section');
    devices.append(this._deviceTitle, this._devices);
    const settings = el('section', 'nl-section');
    settings.append(
      el('h4', '', 'Defaults for launches in this kernel'),
      field('Processes', this._selects.num_processes),
      field('Start method', this._selects.start_method),
      field('Mixed precision', this._selects.mixed_precision)
    );
    const launches = el('section', 'nl-section');
    launches.append(el('h4', '', 'Launches'), this._noLaunches, this._launchList);
    this._ready.append(devices, this._sections, settings, this._error, launches);
    this.node.append(el('h3', 'nl-title', 'Notebook launcher'), this._message, this._loadButton, this._ready);
  }

  private _render(connection: Connection): void {
    const ready = connection.phase === 'ready';
    this._ready.style.display = ready ? '' : 'none';
    this._loadButton.style.display = connection.phase === 'not-loaded' ? '' : 'none';
    this._loadButton.disabled = false;
    this._message.textContent = MESSAGES[connection.phase];
    if (connection.phase !== 'ready') {
      this._launchRows.clear();
      this._launchList.replaceChildren();
      this._inventoryKey = '';
      return;
    }
    this._renderDevices(connection.state.inventory);
    this._renderSections(connection.state.sections);
    this._renderSettings(connection.state);
    this._error.textContent = connection.error;
    this._renderLaunches(connection.state.launches);
  }

  private _renderDevices(inventory: IInventory): void {
    const key = JSON.stringify(inventory);
    if (key === this._inventoryKey) {
      return;
    }
    this._inventoryKey = key;
    this._deviceTitle.textContent = `Devices (launches use ${inventory.device.toUpperCase()})`;
    const items = inventory.cuda.map(gpu => {
      const memory = gpu.memory_mib ? ` · ${(gpu.memory_mib / 1024).toFixed(0)} GiB` : '';
      return el('li', 'nl-device', `GPU ${gpu.index}: ${gpu.name}${memory}`);
    });
    if (inventory.tpu.cores > 0) {
      const kind = inventory.tpu.type ? ` (${inventory.tpu.type})` : '';
      items.push(el('li', 'nl-device', `TPU: ${inventory.tpu.cores} cores${kind}`));
    }
    items.push(el('li', 'nl-device', `CPU: ${inventory.cpu.count} cores`));
    this._devices.replaceChildren(...items);
  }

  private _renderSections(sections: IStateMsg['sections']): void {
    const key = JSON.stringify(sections);
    if (key === this._sectionsKey) {
      return;
    }
    this._sectionsKey = key;
    const shown = Object.entries(sections).filter((entry): entry is [string, IStatusSection] => entry[1] !== null);
    this._sections.replaceChildren(...shown.map(([name, section]) => this._section(name, section)));
  }

  /** One backend's section: its heading, one line per row, its buttons. */
  private _section(name: string, section: IStatusSection): HTMLElement {
    const node = el('section', `nl-section nl-backend nl-state-${section.state}`);
    node.dataset.testid = `nl-section-${name}`;
    if (section.title) {
      node.append(el('h4', '', section.title));
    }
    for (const row of section.rows) {
      const line = el('div', `nl-row nl-row-${row.style}`, row.text);
      if (row.key) {
        line.dataset.key = row.key;
      }
      if (row.hint) {
        line.title = row.hint;
      }
      node.append(line);
    }
    if (section.actions.length) {
      const bar = el('div', 'nl-actions');
      for (const action of section.actions) {
        const button = el('button', 'jp-mod-styled nl-action', action.label);
        button.dataset.action = action.id;
        button.onclick = () => {
          button.disabled = true; // until the section is drawn again
          this._link.act(name, action.id);
        };
        bar.append(button);
      }
      node.append(bar);
    }
    return node;
  }

  private _renderSettings(state: IStateMsg): void {
    const { inventory, settings, choices } = state;
    const counts: [string, string][] = [['', `default (${inventory.default_processes})`]];
    for (let n = 1; n <= inventory.max_processes; n++) {
      counts.push([String(n), String(n)]);
    }
    setOptions(this._selects.num_processes, counts);
    setOptions(
      this._selects.start_method,
      choices.start_method.map(c => [c, c])
    );
    setOptions(
      this._selects.mixed_precision,
      choices.mixed_precision.map(c => [c, c])
    );
    const values: { [K in keyof ISettings]: string } = {
      num_processes: settings.num_processes === null ? '' : String(settings.num_processes),
      start_method: settings.start_method,
      mixed_precision: settings.mixed_precision
    };
    for (const name of Object.keys(values) as (keyof ISettings)[]) {
      const node = this._selects[name];
      if (document.activeElement !== node && node.value !== values[name]) {
        node.value = values[name];
      }
    }
  }

  private _renderLaunches(launches: ILaunchInfo[]): void {
    const ids = new Set(launches.map(l => l.id));
    for (const [id, row] of this._launchRows) {
      if (!ids.has(id)) {
        row.node.remove();
        this._launchRows.delete(id);
      }
    }
    const ordered = [...launches].reverse();
    ordered.forEach((launch, index) => {
      let row = this._launchRows.get(launch.id);
      if (!row) {
        row = new LaunchRow(this._link);
        this._launchRows.set(launch.id, row);
      }
      row.update(launch);
      if (this._launchList.children[index] !== row.node) {
        this._launchList.insertBefore(row.node, this._launchList.children[index] ?? null);
      }
    });
    this._noLaunches.style.display = launches.length ? 'none' : '';
    this._tick();
  }

  private _tick(): void {
    const connection = this._link.connection;
    if (connection.phase !== 'ready') {
      return;
    }
    const now = Date.now();
    for (const [id, row] of this._launchRows) {
      row.tick(now - (connection.receivedAt.get(id) ?? now));
    }
  }

  private _link: KernelLink;
  private _message: HTMLDivElement;
  private _loadButton: HTMLButtonElement;
  private _ready: HTMLDivElement;
  private _devices: HTMLUListElement;
  private _deviceTitle: HTMLHeadingElement;
  private _sections: HTMLDivElement;
  private _sectionsKey = '';
  private _selects: { [K in keyof ISettings]: HTMLSelectElement };
  private _error: HTMLDivElement;
  private _launchList: HTMLDivElement;
  private _noLaunches: HTMLDivElement;
  private _launchRows = new Map<string, LaunchRow>();
  private _inventoryKey = '';
  private _ticker: number;
}

const MESSAGES: { [phase in Connection['phase']]: string } = {
  'no-notebook': 'Open a notebook to see its kernel’s devices and launches.',
  'no-kernel': 'This notebook has no kernel.',
  connecting: 'Connecting to the kernel…',
  restarting: 'The kernel is restarting…',
  'not-loaded': 'notebook_launcher is not loaded in this kernel.',
  ready: ''
};

/** One launch in the list, updated in place. */
class LaunchRow {
  constructor(link: KernelLink) {
    this._link = link;
    this.node = el('div', 'nl-launch');
    this._line = el('div', 'nl-launch-line');
    this._cellLink = el('a', 'nl-cell-link');
    this._cellLink.href = '#';
    this._cellLink.onclick = event => {
      event.preventDefault();
      this._revealCell();
    };
    this._text = el('span', '');
    this._elapsed = el('span', 'nl-elapsed');
    this._line.append(this._cellLink, this._text, this._elapsed);
    this._chips = el('div', 'nl-launch-chips');
    this._stop = el('button', 'jp-mod-styled jp-mod-warn nl-stop', 'Stop');
    this._stop.onclick = () => {
      if (this._launch) {
        this._link.stop(this._launch);
      }
    };
    this.node.append(this._line, this._chips, this._stop);
  }

  update(launch: ILaunchInfo): void {
    this._launch = launch;
    this.node.className = `nl-launch nl-launch-${launch.status}`;
    this.node.dataset.launchId = launch.id;
    this._cellLink.textContent = launch.cell === null ? '' : `In [${launch.cell}]`;
    this._cellLink.style.display = launch.cell === null ? 'none' : '';
    const attempt = launch.attempt > 0 ? ` · restart ${launch.attempt}` : '';
    this._text.textContent =
      ` ${launch.kind} ${launch.id} · ${plural(launch.ranks.length, 'rank')} · ${launch.device} · ` +
      `${launch.start_method} · ${launch.status}${attempt} · `;
    const chips = launch.ranks.map(rank => {
      const status = launch.rank_status[String(rank)] ?? 'starting';
      const chip = el('span', `nl-rank nl-rank-${status}`, `${rank}: ${status}`);
      const place = launch.places[String(rank)];
      if (place) {
        chip.title = `rank ${rank} runs on ${place}`;
      }
      return chip;
    });
    this._chips.replaceChildren(...chips);
    const running = launch.status === 'running' || launch.status === 'starting';
    this._stop.style.display = running ? '' : 'none';
    this._stop.title = launch.waited_on
      ? 'Interrupt the kernel: the cell waiting on this launch ends every rank'
      : 'End every rank of this launch';
  }

  /** Show the elapsed time, counting on locally while the launch runs. */
  tick(sinceUpdateMs: number): void {
    const launch = this._launch;
    if (!launch) {
      return;
    }
    const running = launch.status === 'running' || launch.status === 'starting';
    const seconds = launch.elapsed + (running ? sinceUpdateMs / 1000 : 0);
    this._elapsed.textContent = `${seconds.toFixed(1)} s`;
  }

  private _revealCell(): void {
    const notebook = this._link.notebook;
    const launch = this._launch;
    if (!notebook || !launch || launch.cell === null) {
      return;
    }
    const content = notebook.content;
    content.widgets.forEach((cell, index) => {
      const model = cell.model;
      if (model.type === 'code' && (model as ICodeCellModel).executionCount === launch.cell) {
        content.activeCellIndex = index;
        void content.scrollToCell(cell);
      }
    });
  }

  readonly node: HTMLDivElement;
  private _link: KernelLink;
  private _launch: ILaunchInfo | null = null;
  private _line: HTMLDivElement;
  private _cellLink: HTMLAnchorElement;
  private _text: HTMLSpanElement;
  private _elapsed: HTMLSpanElement;
  private _chips: HTMLDivElement;
  private _stop: HTMLButtonElement;
}

function plural(count: number, noun: string, nouns = `${noun}s`): string {
  return `${count} ${count === 1 ? noun : nouns}`;
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

function select(testId: string, onChange: (value: string) => void): HTMLSelectElement {
  const node = el('select', 'jp-mod-styled nl-select');
  node.dataset.testid = testId;
  node.onchange = () => onChange(node.value);
  return node;
}

/** Replace a dropdown's options only when they differ, keeping its value. */
function setOptions(node: HTMLSelectElement, options: [string, string][]): void {
  const key = JSON.stringify(options);
  if (node.dataset.options === key) {
    return;
  }
  const value = node.value;
  node.replaceChildren(
    ...options.map(([optionValue, text]) => {
      const option = el('option', '', text);
      option.value = optionValue;
      return option;
    })
  );
  node.dataset.options = key;
  node.value = value;
}

function field(label: string, node: HTMLSelectElement): HTMLElement {
  const row = el('label', 'nl-field');
  row.append(el('span', 'nl-label', label), node);
  return row;
}
