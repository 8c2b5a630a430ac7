import { ISessionContext } from '@jupyterlab/apputils';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { Kernel, KernelMessage } from '@jupyterlab/services';
import { ISignal, Signal } from '@lumino/signaling';
import type { JSONObject } from '@lumino/coreutils';

import {
  ALIVE_EVERY_MS,
  COMM_TARGET,
  FrontEndMsg,
  ILaunchInfo,
  ISettings,
  IStateMsg,
  KernelMsg,
  parseKernelMsg
} from './messages';
import { openBesideTheCell } from './side_door';

const PAGE_KEY = 'notebook-launcher-page';

/**
 * This page's id: kept in the tab's session storage across reloads (a new one for a new or
 * duplicated tab). The kernel closes an earlier comm of the same page when a new one opens: the
 * close a page sends as it goes is lost when its connection ends first (a reload under load).
 */
export function pageId(): string {
  const navigation = performance.getEntriesByType('navigation')[0] as PerformanceNavigationTiming | undefined;
  let id = navigation?.type === 'reload' ? window.sessionStorage.getItem(PAGE_KEY) : null;
  if (!id) {
    id = `${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 12)}`;
    window.sessionStorage.setItem(PAGE_KEY, id);
  }
  return id;
}

const PAGE_ID = pageId();

/** What the panel shows: where the connection stands and, once connected, the kernel's state. */
export type Connection =
  | { phase: 'no-notebook' }
  | { phase: 'no-kernel' }
  | { phase: 'connecting' }
  | { phase: 'restarting' }
  | { phase: 'not-loaded' }
  | { phase: 'ready'; state: IStateMsg; error: string; receivedAt: Map<string, number> };

/**
 * The sidebar's link to the active notebook's kernel. It follows notebook switches and kernel
 * restarts, opens the `notebook_launcher` comm, checks every incoming message, and keeps the
 * kernel's state. Kernels that import the package announce themselves (a comm the kernel opens
 * to this front end), so the panel connects without a click. It sends only checked settings and
 * requests to stop a launch; Stop interrupts the kernel only when a cell is waiting on the launch.
 * The comm is closed when the page goes (a reload, a closed tab), and while open it says it is
 * alive every `ALIVE_EVERY_MS`: the kernel stops sending to a sidebar that went silent.
 */
export class KernelLink {
  constructor(tracker: INotebookTracker) {
    this._tracker = tracker;
    tracker.currentChanged.connect(this._follow, this);
    window.addEventListener('pagehide', this._onPageHide);
  }

  /** Emitted whenever `connection` changes. */
  get changed(): ISignal<this, Connection> {
    return this._changed;
  }

  get connection(): Connection {
    return this._connection;
  }

  /** The notebook the panel follows. */
  get notebook(): NotebookPanel | null {
    return this._tracker.currentWidget;
  }

  start(): void {
    this._follow();
  }

  setSettings(settings: Partial<ISettings>): void {
    this._send({ type: 'set_settings', request_id: this._request(), settings });
  }

  /** End a launch: a request over the comm, or an interrupt when a cell is blocked on it. */
  stop(launch: ILaunchInfo): void {
    const kernel = this._session?.session?.kernel;
    if (launch.waited_on && kernel) {
      void kernel.interrupt();
    } else {
      this._send({ type: 'stop_launch', request_id: this._request(), id: launch.id });
    }
  }

  /** Do `action` of a backend's `section` (its button was clicked); a refusal shows as the error. */
  act(section: string, action: string): void {
    this._send({ type: 'section_action', request_id: this._request(), section, action });
  }

  /** Run `%load_ext notebook_launcher` in the kernel, then connect. */
  load(): void {
    const kernel = this._session?.session?.kernel;
    if (!kernel) {
      return;
    }
    const future = kernel.requestExecute({
      code: '%load_ext notebook_launcher',
      silent: true,
      store_history: false
    });
    void future.done.then(() => this._connect());
  }

  dispose(): void {
    this._tracker.currentChanged.disconnect(this._follow, this);
    window.removeEventListener('pagehide', this._onPageHide);
    this._unfollow();
    this._close();
  }

  private _onPageHide = (): void => {
    this._close();
  };

  // -- following the notebook and its kernel ----------------------------------------------------

  private _follow = (): void => {
    this._unfollow();
    const notebook = this._tracker.currentWidget;
    this._session = notebook ? notebook.sessionContext : null;
    if (!this._session) {
      this._close();
      this._set({ phase: 'no-notebook' });
      return;
    }
    this._session.kernelChanged.connect(this._onKernelChanged, this);
    this._session.statusChanged.connect(this._onStatus, this);
    void this._session.ready.then(() => this._onKernelChanged());
  };

  private _unfollow(): void {
    if (this._session) {
      this._session.kernelChanged.disconnect(this._onKernelChanged, this);
      this._session.statusChanged.disconnect(this._onStatus, this);
    }
    this._unregisterTarget();
  }

  private _onKernelChanged = (): void => {
    this._unregisterTarget();
    const kernel = this._session?.session?.kernel ?? null;
    if (kernel) {
      kernel.registerCommTarget(COMM_TARGET, this._onKernelHello);
      this._targetKernel = kernel;
    }
    this._connect();
  };

  private _unregisterTarget(): void {
    if (this._targetKernel && !this._targetKernel.isDisposed) {
      this._targetKernel.removeCommTarget(COMM_TARGET, this._onKernelHello);
    }
    this._targetKernel = null;
  }

  /** The kernel opened a comm to us: the package was just imported there. */
  private _onKernelHello = (comm: Kernel.IComm, _msg: KernelMessage.ICommOpenMsg): void => {
    comm.close();
    if (this._connection.phase !== 'ready') {
      this._connect();
    }
  };

  private _onStatus = (_: ISessionContext, status: Kernel.Status): void => {
    if (status === 'restarting' || status === 'autorestarting') {
      this._restarting = true;
      this._close();
      this._set({ phase: 'restarting' });
    } else if (status === 'idle' && this._restarting) {
      this._restarting = false;
      this._connect();
    }
  };

  // -- the comm -------------------------------------------------------------------------------

  private _connect(): void {
    this._close();
    const kernel = this._session?.session?.kernel;
    if (!kernel) {
      this._set({ phase: 'no-kernel' });
      return;
    }
    const comm = kernel.createComm(COMM_TARGET);
    let answer: () => void = () => undefined;
    const answered = new Promise<void>(resolve => {
      answer = resolve;
    });
    comm.onMsg = msg => {
      answer();
      if (this._comm === comm) {
        const parsed = parseKernelMsg(msg.content.data);
        if (parsed) {
          this._onMessage(parsed);
        } else {
          console.warn('notebook-launcher: ignored a malformed message from the kernel', msg.content.data);
        }
      }
    };
    comm.onClose = () => {
      answer();
      if (this._comm === comm) {
        this._comm = null;
        this._set({ phase: 'not-loaded' });
      }
    };
    this._comm = comm;
    this._set({ phase: 'connecting' });
    void openBesideTheCell(kernel, comm, { type: 'get_state', page: PAGE_ID }, answered);
    this._alive = window.setInterval(() => this._send({ type: 'alive' }), ALIVE_EVERY_MS);
  }

  private _close(): void {
    const comm = this._comm;
    this._comm = null;
    if (this._alive !== null) {
      window.clearInterval(this._alive);
      this._alive = null;
    }
    if (comm && !comm.isDisposed) {
      try {
        comm.close();
      } catch {
        // the kernel is gone already
      }
    }
  }

  private _send(msg: FrontEndMsg): void {
    if (this._comm) {
      this._comm.send(msg as unknown as JSONObject); // plain JSON by construction (messages.ts)
    }
  }

  private _request(): string {
    return `r${++this._requests}`;
  }

  private _onMessage(msg: KernelMsg): void {
    const current = this._connection;
    if (msg.type === 'state') {
      const receivedAt = new Map(msg.launches.map(l => [l.id, Date.now()] as [string, number]));
      this._set({ phase: 'ready', state: msg, error: '', receivedAt });
      return;
    }
    if (current.phase !== 'ready') {
      return;
    }
    const state = current.state;
    let error = current.error;
    if (msg.type === 'reply') {
      state.settings = msg.settings;
      error = msg.ok ? '' : msg.error || 'the kernel refused the request';
    } else if (msg.type === 'settings') {
      state.settings = msg.settings;
    } else if (msg.type === 'section') {
      state.sections = { ...state.sections, [msg.name]: msg.section };
    } else if (msg.type === 'launch') {
      const others = state.launches.filter(l => l.id !== msg.launch.id);
      state.launches = [...others, msg.launch].slice(-state.history);
      current.receivedAt.set(msg.launch.id, Date.now());
    }
    this._set({ ...current, state, error });
  }

  private _set(connection: Connection): void {
    this._connection = connection;
    this._changed.emit(connection);
  }

  private _tracker: INotebookTracker;
  private _session: ISessionContext | null = null;
  private _targetKernel: Kernel.IKernelConnection | null = null;
  private _comm: Kernel.IComm | null = null;
  private _connection: Connection = { phase: 'no-notebook' };
  private _changed = new Signal<this, Connection>(this);
  private _requests = 0;
  private _restarting = false;
  private _alive: number | null = null;
}
